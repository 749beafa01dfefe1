"""`python -m bench soak`: the soak's command line.

    python -m bench soak --minutes 20 --rate 1

Exits 1 when the invariants found a violation (see bench/soak/run.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from bench.soak.run import soak

SUMMARY = "a steady rate and random faults for a long time, then the invariants"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--rate", type=float, default=1.0, help="jobs created per second")
    parser.add_argument("--seed", type=int, default=1)


def run(args: argparse.Namespace) -> None:
    report = asyncio.run(soak(args.minutes, args.rate, args.seed))
    print(json.dumps(report, indent=2))
    sys.exit(1 if report["invariant_violations"] else 0)
