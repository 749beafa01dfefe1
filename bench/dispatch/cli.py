"""`python -m bench dispatch`: the dispatch benchmark's command line.

    python -m bench dispatch --jobs 2000 --workers 3
    python -m bench dispatch --quick       # 300 jobs: about two minutes

Writes `bench/results/dispatch-<N>.{json,md,png}` (see bench/dispatch/run.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from bench.dispatch.report import write_reports
from bench.dispatch.run import benchmark

SUMMARY = "the dispatcher against the raw-copy floor"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--status-sample", type=int, default=500)
    parser.add_argument("--steady-rate", type=float, default=50.0,
                        help="jobs/s submitted after the burst, with the burst in flight")
    parser.add_argument("--steady-jobs", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="300 jobs: about two minutes")


def run(args: argparse.Namespace) -> None:
    jobs = 300 if args.quick else args.jobs
    result = asyncio.run(benchmark(jobs=jobs, workers=args.workers,
                                   concurrency=args.concurrency,
                                   status_sample=min(args.status_sample, jobs),
                                   steady_rate=args.steady_rate,
                                   steady_jobs=150 if args.quick else args.steady_jobs))
    stem = write_reports(result)
    print(stem.with_suffix(".md").read_text())
    print(json.dumps(result["dispatcher"], indent=2))
