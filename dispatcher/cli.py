"""The `dispatcher` command line: run the service, run the demo.

Errors a person can fix are printed as one line on stderr with exit code 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

from dispatcher.config import DispatcherConfig


class CliError(Exception):
    """A problem to report as one line."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dispatcher",
        description="Mirrors Kubeflow TrainJobs to worker clusters chosen by quota.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the dispatcher service")
    run.add_argument("--config", type=Path, help="YAML configuration file")
    run.add_argument("--json-logs", action="store_true", help="log one JSON object a line")
    demo = commands.add_parser("demo", help="run on a local manager and two local workers")
    demo.add_argument("--jobs-seconds", type=float, default=6.0,
                      help="how long each simulated training runs")
    demo.add_argument("--port", type=int, default=9464, help="metrics port (0 picks one)")
    return parser


def load_config(path: Path | None) -> DispatcherConfig:
    try:
        return DispatcherConfig.from_file(path) if path else DispatcherConfig()
    except FileNotFoundError:
        raise CliError(f"config file {path} not found") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CliError(f"config {path}: {where}: {first['msg']}") from None


async def _run_service(config: DispatcherConfig) -> None:
    from dispatcher.app import Dispatcher

    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await Dispatcher(config).run()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dispatcher.observability.logging import setup_logging

    try:
        if args.command == "run":
            config = load_config(args.config)
            setup_logging(json_logs=args.json_logs or config.json_logs)
            asyncio.run(_run_service(config))
            return 0
        if args.command == "demo":
            from dispatcher.demo import run_demo

            setup_logging(json_logs=False, level=30)
            return asyncio.run(run_demo(run_seconds=args.jobs_seconds, port=args.port))
    except CliError as error:
        print(f"dispatcher: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
