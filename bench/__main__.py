"""`python -m bench`: the dispatch benchmark (see bench/dispatch.py); with `--peer
multikueue`, the dispatcher beside Kueue's MultiKueue (see bench/peer_multikueue.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from bench.dispatch import benchmark
from bench.report import write_reports


def main() -> None:
    if any(a == "--peer" or a.startswith("--peer=") for a in sys.argv[1:]):
        from bench.peer_main import main as peer_main  # its own options: see --peer --help
        peer_main(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--status-sample", type=int, default=500)
    parser.add_argument("--steady-rate", type=float, default=50.0,
                        help="jobs/s submitted after the burst, with the burst in flight")
    parser.add_argument("--steady-jobs", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="300 jobs: about two minutes")
    parser.add_argument("--peer", choices=["multikueue"],
                        help="compare with a peer system instead, with its own options "
                             "(python -m bench --peer multikueue --help)")
    args = parser.parse_args()
    jobs = 300 if args.quick else args.jobs
    result = asyncio.run(benchmark(jobs=jobs, workers=args.workers,
                                   concurrency=args.concurrency,
                                   status_sample=min(args.status_sample, jobs),
                                   steady_rate=args.steady_rate,
                                   steady_jobs=150 if args.quick else args.steady_jobs))
    stem = write_reports(result)
    print(stem.with_suffix(".md").read_text())
    print(json.dumps(result["dispatcher"], indent=2))


if __name__ == "__main__":
    main()
