"""`python -m bench peer`: the peer benchmark's command line (the peer is Kueue's MultiKueue).

    python -m bench peer --quick
    python -m bench peer --workers 3,10 --jobs 1000,5000 --peer-minutes 10 \\
        --scenarios burst,frozen,oversubscribed,steady,complete,preemption

For every worker count: the burst (bench/peer/multikueue.py) for every job count, every
system in turn, then the behaviour scenarios (bench/peer/behaviour.py) for the scenario
systems. `--quick`: 200 jobs, 2 workers, the peer capped at 2 minutes, the scenarios at
their quick sizes, and fewer MultiKueue settings (defaults, the best one).
Writes `bench/results/peer-multikueue-<N>-<K>w.{json,md,png}` per burst and
`bench/results/peer-scenarios-<K>w.{json,md,png}` per worker count (with some scenarios
only: `peer-scenarios-<K>w-<scenarios>.*`, so a partial run keeps the whole one).
`--real-chain` runs `complete` on the real Trainer chain on every cluster (Trainer v2.3,
JobSet, kwok nodes holding each worker's quota) instead of the simulated trainer, into
`peer-scenarios-<K>w-...-real-chain.*`:

    python -m bench peer --workers 2 --scenarios complete --real-chain \\
        --quota-cpu-per-worker 16 --scenario-systems dispatcher-fair,multikueue-default

`preemption` (bench/peer/preemption.py) runs only the systems that preempt: by default
`dispatcher-fair-preempt` and `multikueue-tuned-remote-qps` (with Kueue's
MultiKueueOrchestratedPreemption gate on, which the scenario itself turns on):

    python -m bench peer --workers 2 --scenarios preemption \\
        --scenario-systems dispatcher-fair-preempt,multikueue-tuned-remote-qps
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json

from bench.peer.behaviour import SCENARIOS, run_scenarios
from bench.peer.multikueue import peer_benchmark, write_peer_reports
from bench.peer.scenarios import QUICK_SIZES, ScenarioSizes
from bench.peer.systems import SYSTEMS
from devkit.localcluster.binaries import ensure_kueue
from devkit.localcluster.kueue import ensure_remote_qps_binary

QUICK_JOBS = 200
QUICK_WORKERS = 2
QUICK_CAP_SECONDS = 120.0
STATUS_SAMPLE = 100
QUICK_SYSTEMS = ("dispatcher-fair", "multikueue-default", "dispatcher",
                 "multikueue-tuned-remote-qps", "dispatcher-check")
"""`--quick` runs MultiKueue at its defaults and at its best here, and the dispatcher in
the symmetric setting (its AdmissionCheck behind the same manager-side Kueue); the
MultiKueue settings between (qps, tuned, tuned-incremental, qps-remote-qps) only in full
runs or with --systems."""
SCENARIO_SYSTEMS = ("dispatcher-fair", "dispatcher-fair-wait", "dispatcher-fair-preempt",
                    "dispatcher-check", "multikueue-tuned-remote-qps")
"""The fair mode (also keeping a lost worker's jobs, and preempting), the symmetric mode
(behind the same manager-side Kueue as MultiKueue) and MultiKueue at its best tuning."""
ONLY_IN = {"dispatcher-fair-wait": "frozen", "dispatcher-fair-preempt": "preemption"}
"""Systems that differ from another only in one scenario run only there."""


SUMMARY = "the dispatcher beside Kueue's MultiKueue"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true")
    p.add_argument("--jobs", default="1000,5000", help="job counts of the burst")
    p.add_argument("--workers", default="3,10", help="worker counts")
    p.add_argument("--peer-minutes", type=float, default=10.0,
                   help="time cap of each MultiKueue burst")
    p.add_argument("--systems", default="", help="systems of the burst (default: all)")
    p.add_argument("--scenarios", default=",".join(("burst", *SCENARIOS)),
                   help="burst and/or " + ", ".join(SCENARIOS))
    p.add_argument("--scenario-systems", default=",".join(SCENARIO_SYSTEMS))
    p.add_argument("--real-chain", action="store_true",
                   help="run `complete` on the real Trainer, JobSet and kwok nodes")
    p.add_argument("--quota-cpu-per-worker", type=int, default=0,
                   help="the scenarios' CPU quota per worker (jobs take 1 each)")


def _names(text: str, known: list[str] | tuple[str, ...], what: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; known: {sorted(known)}")
    return names


def run(args: argparse.Namespace) -> None:
    jobs = [QUICK_JOBS] if args.quick else [int(n) for n in args.jobs.split(",") if n]
    workers = ([QUICK_WORKERS] if args.quick
               else [int(n) for n in args.workers.split(",") if n])
    cap = QUICK_CAP_SECONDS if args.quick else args.peer_minutes * 60
    scenarios = _names(args.scenarios, ("burst", *SCENARIOS), "scenarios")
    systems = (_names(args.systems, list(SYSTEMS), "systems")
               or [n for n in (QUICK_SYSTEMS if args.quick else SYSTEMS) if n not in ONLY_IN])
    scenario_systems = _names(args.scenario_systems, list(SYSTEMS), "systems")
    sizes = QUICK_SIZES if args.quick else ScenarioSizes()
    if args.real_chain:
        sizes = dataclasses.replace(sizes, real_chain=True)
    if args.quota_cpu_per_worker:
        sizes = dataclasses.replace(sizes, quota_cpu_per_worker=args.quota_cpu_per_worker)
    used = (systems if "burst" in scenarios else []) + scenario_systems
    if any(SYSTEMS[n].multikueue.remote_qps is not None for n in used):
        ensure_remote_qps_binary(ensure_kueue())  # before any cluster starts: minutes
    for count in workers:
        for n in jobs if "burst" in scenarios else []:
            result = asyncio.run(peer_benchmark(
                jobs=n, workers=count, cap_seconds=cap,
                status_sample=min(STATUS_SAMPLE, n), systems=systems))
            print(write_peer_reports(result))
            print(json.dumps({s: {k: v for k, v in r["burst"].items() if k != "latencies"}
                              for s, r in result["systems"].items()}, indent=2))
        behaviour = [s for s in scenarios if s != "burst"]
        if behaviour:
            from bench.peer.report import write_scenario_reports

            results = asyncio.run(run_scenarios(
                {n: SYSTEMS[n] for n in scenario_systems}, workers=count,
                scenarios=behaviour, sizes=sizes, only_in=ONLY_IN))
            print(write_scenario_reports(results, workers=count, sizes=sizes,
                                         partial=set(behaviour) != set(SCENARIOS)))
