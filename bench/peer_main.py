"""`python -m bench --peer multikueue`: argument handling for bench/peer_multikueue.py."""

from __future__ import annotations

import argparse
import asyncio
import json

from bench.peer_multikueue import peer_benchmark, write_peer_reports
from bench.peer_systems import SYSTEMS

QUICK_JOBS = 200
QUICK_WORKERS = 2
QUICK_CAP_SECONDS = 120.0
STATUS_SAMPLE = 100


def run_peer(args: argparse.Namespace) -> None:
    jobs = QUICK_JOBS if args.quick else args.jobs
    workers = QUICK_WORKERS if args.quick else args.workers
    cap = QUICK_CAP_SECONDS if args.quick else args.peer_minutes * 60
    systems = [s for s in args.systems.split(",") if s] or list(SYSTEMS)
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; known: {sorted(SYSTEMS)}")
    result = asyncio.run(peer_benchmark(jobs=jobs, workers=workers, cap_seconds=cap,
                                        status_sample=min(STATUS_SAMPLE, jobs),
                                        systems=systems))
    print(write_peer_reports(result))
    print(json.dumps({n: s["burst"] for n, s in result["systems"].items()}, indent=2))
