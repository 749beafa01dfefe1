"""`python -m bench chain-cost`: what the real Trainer chain costs a cluster, measured.

    python -m bench chain-cost                   # 50 jobs: about two minutes
    python -m bench chain-cost --jobs 20 --idle-seconds 20

Starts a manager and one worker (etcd, an API server and the controller manager each),
the real Trainer and JobSet on both, and on the worker kube-scheduler and kwok with
`--nodes` fake nodes; then `dispatcher run` as its own process. Every process is read
from /proc: its resident memory (VmRSS) after `--settle-seconds`, its CPU over
`--idle-seconds` of idle, then its CPU while `--jobs` short TrainJobs (one pod each,
run `--job-seconds` by kwok) are created on the manager, dispatched to the worker, run
there to Complete and cleaned up (the mirror deleted, its JobSet, Job and pod collected).
A job's CPU is the window's CPU less what idle would have used in that time, over the
jobs. The peak resident memory (VmHWM) includes each process's start.

Writes `bench/results/chain-cost.json` and `.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from bench.harness import (
    NAMESPACE,
    RESULTS,
    SAMPLE_RUNTIME,
    CpuMeter,
    JobWatch,
    bounded,
    connect,
    create_claimed,
    proc_peak_rss_mb,
    running_dispatcher,
    wait_for,
)
from devkit.localcluster import LocalCluster, LocalControlPlane
from devkit.localcluster.processes import ManagedProcess
from devkit.localcluster.trainer import NodePool, chain_crd_files, kwok_timed
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import NAMESPACES, PODS, Resource

SUMMARY = "what the real Trainer chain costs per cluster: memory, CPU at idle and per job"
CLUSTERS = ("manager", "worker")
CHAIN = ("trainer", "jobset", "kube-scheduler", "kwok")
"""The chain's own processes (kube-scheduler and kwok on the worker only)."""
REPORT_STEM = RESULTS / "chain-cost"
CREATE_CONCURRENCY = 8
CLEANUP_TIMEOUT_SECONDS = 120.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=50, help="TrainJobs run to Complete")
    parser.add_argument("--job-seconds", type=float, default=1.0,
                        help="how long kwok runs each job's pod")
    parser.add_argument("--idle-seconds", type=float, default=30.0,
                        help="how long idle CPU is measured")
    parser.add_argument("--settle-seconds", type=float, default=10.0,
                        help="wait after everything is ready, before measuring")
    parser.add_argument("--nodes", type=int, default=4,
                        help="kwok nodes of the worker (8 CPU each; a job's pod takes 1)")


def run(args: argparse.Namespace) -> None:
    result = asyncio.run(measure(jobs=args.jobs, job_seconds=args.job_seconds,
                                 idle_seconds=args.idle_seconds,
                                 settle_seconds=args.settle_seconds, nodes=args.nodes))
    write_reports(result, REPORT_STEM)
    print(REPORT_STEM.with_suffix(".md").read_text())


def proc_rss_mb(pid: int) -> float:
    """Resident memory of `pid` now, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cluster_pids(name: str, cluster: LocalCluster) -> dict[str, int]:
    """`<cluster>/<process>` -> pid: the API server, the controller manager, the chain."""
    processes: dict[str, ManagedProcess | None] = {
        "kube-apiserver": cluster.apiserver,
        "kube-controller-manager": cluster.controller_manager}
    chain = cluster.trainer
    if chain is not None:
        processes.update({"trainer": chain.trainer.process, "jobset": chain.jobset.process,
                          "kube-scheduler": chain.scheduler, "kwok": chain.kwok})
    return {f"{name}/{process}": p.pid for process, p in processes.items()
            if p is not None and p.pid is not None}


async def _start(plane: LocalControlPlane, *, nodes: int, job_seconds: float
                 ) -> dict[str, ClusterClient]:
    await plane.start(CLUSTERS, controllers=CLUSTERS, crd_files=chain_crd_files())
    await asyncio.gather(plane.clusters["manager"].start_trainer(None),
                         plane.clusters["worker"].start_trainer(NodePool(count=nodes)))
    clients = await connect(plane, concurrency=CREATE_CONCURRENCY)
    runtime = kwok_timed(yaml.safe_load(SAMPLE_RUNTIME.read_text()), run_seconds=job_seconds)
    for client in clients.values():
        await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(runtime, field_manager="bench")
        await Resource(client, NAMESPACES).create({"metadata": {"name": NAMESPACE}})
    return clients


async def _idle(pids: dict[str, int], seconds: float) -> dict[str, Any]:
    meter = CpuMeter(pids)
    meter.start()
    await asyncio.sleep(seconds)
    used = meter.stop()
    return {"seconds": seconds, "cpu_seconds": used,
            "rss_mb": {name: round(proc_rss_mb(pid), 1) for name, pid in pids.items()}}


async def _leftovers(worker: ClusterClient) -> int:
    """Mirrors and pods still on the worker, in the benchmark's namespace."""
    mirrors = (await Resource(worker, TRAINJOBS).list(namespace=NAMESPACE))["items"]
    pods = (await Resource(worker, PODS).list(namespace=NAMESPACE))["items"]
    return len(mirrors) + len(pods)


async def _wait_cleaned_up(worker: ClusterClient) -> int:
    """Until nothing of the jobs is left on the worker (or a timeout); what is left."""
    deadline = time.monotonic() + CLEANUP_TIMEOUT_SECONDS
    left = await _leftovers(worker)
    while left and time.monotonic() < deadline:
        await asyncio.sleep(1.0)  # a list a second: next to nothing beside the jobs
        left = await _leftovers(worker)
    return left


async def _run_jobs(clients: dict[str, ClusterClient], pids: dict[str, int], *,
                    jobs: int) -> dict[str, Any]:
    """Create `jobs` claimed TrainJobs at once; CPU until all are Complete and gone from
    the worker."""
    watch = JobWatch(clients["manager"], NAMESPACE, label="chain-cost")
    await watch.informer.synced.wait()
    meter = CpuMeter(pids)
    meter.start()
    started = time.monotonic()
    try:
        await bounded(CREATE_CONCURRENCY, [create_claimed(clients["manager"], f"job-{i:04d}")
                                           for i in range(jobs)])
        all_finished = await wait_for(lambda: len(watch.finished) >= jobs,
                                      timeout=60 + jobs * 5, interval=0.2)
        finished_after = time.monotonic() - started
        left = await _wait_cleaned_up(clients["worker"])
    finally:
        await watch.stop()
    window = time.monotonic() - started
    used = meter.stop()
    outcomes = [outcome for _, outcome in watch.finished.values()]
    return {"jobs": jobs, "all_finished": all_finished,
            "complete": outcomes.count("Complete"), "failed": outcomes.count("Failed"),
            "seconds_until_all_finished": round(finished_after, 1),
            "seconds_until_cleaned_up": round(window, 1), "left_on_worker": left,
            "cpu_seconds": used}


async def measure(*, jobs: int, job_seconds: float, idle_seconds: float,
                  settle_seconds: float, nodes: int) -> dict[str, Any]:
    async with LocalControlPlane() as plane:
        clients = await _start(plane, nodes=nodes, job_seconds=job_seconds)
        try:
            async with running_dispatcher(plane, ["worker"]) as dispatcher:
                pids = {name: pid for cluster_name, cluster in plane.clusters.items()
                        for name, pid in cluster_pids(cluster_name, cluster).items()}
                pids["etcd"] = plane.etcd.pid or 0
                pids["dispatcher"] = dispatcher.process.pid
                await asyncio.sleep(settle_seconds)
                idle = await _idle(pids, idle_seconds)
                load = await _run_jobs(clients, pids, jobs=jobs)
                peak = {name: round(proc_peak_rss_mb(pid), 1) for name, pid in pids.items()}
        finally:
            for client in clients.values():
                await client.close()
    return summarize(idle=idle, load=load, peak=peak, sizes={
        "jobs": jobs, "job_seconds": job_seconds, "idle_seconds": idle_seconds,
        "settle_seconds": settle_seconds, "worker_nodes": nodes})


def summarize(*, idle: dict[str, Any], load: dict[str, Any], peak: dict[str, float],
              sizes: dict[str, Any]) -> dict[str, Any]:
    """Per process: idle RSS, peak RSS, idle CPU (% of a core), CPU per job (ms, net of
    idle); then per cluster, the chain's processes together and the API server."""
    window = load["seconds_until_cleaned_up"]
    jobs = max(load["complete"], 1)
    processes: dict[str, dict[str, float]] = {}
    for name, idle_cpu in idle["cpu_seconds"].items():
        if name == "total":
            continue
        rate = idle_cpu / idle["seconds"]
        processes[name] = {
            "rss_idle_mb": idle["rss_mb"][name], "rss_peak_mb": peak[name],
            "idle_cpu_percent": round(rate * 100, 2),
            "cpu_ms_per_job": round(max(load["cpu_seconds"][name] - rate * window, 0.0)
                                    / jobs * 1000, 1),
        }
    clusters = {}
    for cluster in ("manager", "worker"):
        chain = [processes[f"{cluster}/{p}"] for p in CHAIN if f"{cluster}/{p}" in processes]
        clusters[cluster] = {
            "chain": {key: round(sum(p[key] for p in chain), 2) for key in (
                "rss_idle_mb", "idle_cpu_percent", "cpu_ms_per_job")},
            "controller_manager": processes[f"{cluster}/kube-controller-manager"],
            "apiserver": processes[f"{cluster}/kube-apiserver"],
        }
    return {"measured": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cores": os.cpu_count(), "sizes": sizes,
            "run": {k: v for k, v in load.items() if k != "cpu_seconds"},
            "processes": processes, "clusters": clusters}


def markdown(result: dict[str, Any]) -> str:
    sizes, run_ = result["sizes"], result["run"]
    lines = [
        "# The real Trainer chain's cost per cluster",
        "",
        f"`python -m bench chain-cost --jobs {sizes['jobs']} --job-seconds "
        f"{sizes['job_seconds']:g} --idle-seconds {sizes['idle_seconds']:g} --nodes "
        f"{sizes['worker_nodes']}`, {result['measured']}, {result['cores']} cores. A "
        f"manager and one worker ({sizes['worker_nodes']} kwok nodes); {run_['complete']} "
        f"of {run_['jobs']} jobs Complete ({run_['failed']} failed) in "
        f"{run_['seconds_until_all_finished']} s, mirrors and pods gone from the worker "
        f"after {run_['seconds_until_cleaned_up']} s ({run_['left_on_worker']} left).",
        "",
        "| cluster | the chain (Trainer, JobSet, kube-scheduler, kwok): RSS idle MiB | "
        "idle CPU % of a core | CPU ms/job | controller manager RSS MiB | "
        "API server RSS MiB | API server idle CPU % | API server CPU ms/job |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, c in result["clusters"].items():
        chain, api = c["chain"], c["apiserver"]
        lines.append(f"| {name} | {chain['rss_idle_mb']} | {chain['idle_cpu_percent']} | "
                     f"{chain['cpu_ms_per_job']} | {c['controller_manager']['rss_idle_mb']} | "
                     f"{api['rss_idle_mb']} | {api['idle_cpu_percent']} | "
                     f"{api['cpu_ms_per_job']} |")
    lines += ["", "Every process (CPU per job net of its idle CPU; peak RSS includes its "
              "start):", "",
              "| process | RSS idle MiB | RSS peak MiB | idle CPU % of a core | CPU ms/job |",
              "| --- | --- | --- | --- | --- |"]
    for name, p in result["processes"].items():
        lines.append(f"| {name} | {p['rss_idle_mb']} | {p['rss_peak_mb']} | "
                     f"{p['idle_cpu_percent']} | {p['cpu_ms_per_job']} |")
    return "\n".join(lines) + "\n"


def write_reports(result: dict[str, Any], stem: Path) -> None:
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
