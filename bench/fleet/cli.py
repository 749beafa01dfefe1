"""`python -m bench fleet`: one dispatcher and many lean workers, measured.

    python -m bench fleet --workers 10,25,50
    python -m bench fleet --quick          # 3 and 8 workers, small bursts: a few minutes

Writes `bench/results/fleet.{json,md,png}`, or `fleet-<counts>w.*` for other counts
(see bench/fleet/run.py).
"""

from __future__ import annotations

import argparse
import asyncio

from bench.fleet.report import write_reports
from bench.fleet.run import Plan, benchmark

SUMMARY = "one dispatcher and 10, 25, 50 lean workers"
DEFAULT_WORKERS = "10,25,50"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", default=DEFAULT_WORKERS,
                        help="comma-separated worker counts, one control plane each")
    parser.add_argument("--burst", type=int, default=5000)
    parser.add_argument("--queued", type=int, default=20000)
    parser.add_argument("--status-sample", type=int, default=200)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--quick", action="store_true",
                        help="3 and 8 workers, 300 jobs, 1000 queued")


def run(args: argparse.Namespace) -> None:
    sizes = [3, 8] if args.quick else [int(n) for n in args.workers.split(",")]
    plan = Plan(burst=300 if args.quick else args.burst,
                queued=1000 if args.quick else args.queued,
                status_sample=min(args.status_sample, 100 if args.quick else args.status_sample),
                idle_seconds=10.0 if args.quick else args.idle_seconds,
                concurrency=args.concurrency)
    name = ("fleet-quick" if args.quick else "fleet" if args.workers == DEFAULT_WORKERS
            else f"fleet-{args.workers.replace(',', '-')}w")
    stem = write_reports(asyncio.run(benchmark(sizes=sizes, plan=plan)), name=name)
    print(stem.with_suffix(".md").read_text())
