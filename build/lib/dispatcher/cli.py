"""The `dispatcher` command line: run the service, run the demo, bring a local
environment up, administer workers, list jobs, read a job's logs.

Errors a person can fix are printed as one line on stderr with exit code 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dispatcher import logs_cli
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
                      help="how long kwok runs each pod of the sample jobs")
    demo.add_argument("--port", type=int, default=9464,
                      help="port of the status page; /metrics on the next one (0 picks both)")
    demo.add_argument("--stay", action="store_true",
                      help="stay up until Ctrl-C instead (same as `dispatcher up`)")
    up = commands.add_parser("up", help="a local manager and workers that stay up until "
                                        "Ctrl-C, for kubectl and the Kubeflow SDK")
    up.add_argument("--dir", type=Path, default=None, dest="directory",
                    help="where kubeconfigs and data go (default "
                         "~/.cache/trainjob-dispatcher/up)")
    up.add_argument("--port", type=int, default=9464,
                    help="port of the status page; /metrics on the next one (0 picks both)")
    up.add_argument("--jobs-seconds", type=float, default=30.0,
                    help="how long kwok runs each pod of the sample jobs")
    up.add_argument("--kueue", action="store_true",
                    help="run a real Kueue on each worker (mirrors wait for its admission)")
    _admin_parsers(commands)
    logs_cli.add_parser(commands)
    return parser


def _admin_parsers(commands: Any) -> None:
    def manager_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--kubeconfig", type=Path,
                            help="the manager's kubeconfig (default $KUBECONFIG, ~/.kube/config)")
        parser.add_argument("--namespace", default="trainjob-dispatcher",
                            help="the dispatcher's namespace, where Secrets go")

    cluster = commands.add_parser("cluster", help="register and administer worker clusters")
    verbs = cluster.add_subparsers(dest="verb", required=True)
    add = verbs.add_parser("add", help="validate a worker's kubeconfig and register it")
    add.add_argument("name")
    add.add_argument("--worker-kubeconfig", type=Path, required=True, dest="worker_kubeconfig",
                     help="kubeconfig of the worker (inline credentials)")
    add.add_argument("--quota", default="", help="cpu=64,memory=256Gi,nvidia.com/gpu=8")
    add.add_argument("--label", default="", help="k=v,k2=v2 (what cluster selectors match)")
    add.add_argument("--local-queue", default="", help="Kueue LocalQueue for mirrors")
    add.add_argument("--cluster-queue", default="", help="Kueue ClusterQueue for live quota")
    add.add_argument("--allow-insecure", action="store_true",
                     help="accept exec plugins and file references")
    rotate = verbs.add_parser("rotate-credentials", help="replace a worker's kubeconfig")
    rotate.add_argument("name")
    rotate.add_argument("--worker-kubeconfig", type=Path, required=True,
                        dest="worker_kubeconfig")
    rotate.add_argument("--allow-insecure", action="store_true")
    for verb, text in (("cordon", "no new placements"), ("uncordon", "allow placements again"),
                       ("drain", "evict the worker's jobs and requeue them elsewhere")):
        sub = verbs.add_parser(verb, help=text)
        sub.add_argument("name")
        manager_options(sub)
    lister = verbs.add_parser("list", help="workers, health, quota and use")
    for sub in (add, rotate, lister):
        manager_options(sub)
    jobs = commands.add_parser("jobs", help="claimed TrainJobs: where they run, why they wait")
    jobs.add_argument("--kubeconfig", type=Path, help="the manager's kubeconfig")
    jobs.add_argument("-n", "--job-namespace", dest="job_namespace", default=None)
    jobs.add_argument("--config", type=Path, default=None,
                      help="the dispatcher's configuration file: its claim group says which "
                           "jobs it claims (default: the defaults and DISPATCHER_ variables)")
    jobs.add_argument("--namespace", default=None,
                      help="the dispatcher's namespace, where its Placement records are "
                           "(default: the configuration's)")
    jobs.add_argument("--managed-by", default=None,
                      help="the spec.managedBy value claimed (default: the configuration's)")
    jobs.add_argument("--limit", type=int, default=None,
                      help="show at most this many jobs per table (default all)")


async def _admin(args: argparse.Namespace) -> int:
    from rich.console import Console

    from dispatcher import admin_cli as a
    from dispatcher.claim import Claim

    console = Console()
    if args.command == "jobs":
        config = load_config(args.config)
        claim = config.claim
        if args.managed_by:
            claim = claim.model_copy(update={"managed_by": args.managed_by})
        return await a.with_manager(args.kubeconfig, lambda m: a.jobs_list(
            m, namespace=args.job_namespace, claim=Claim(claim),
            dispatcher_namespace=args.namespace or config.namespace, console=console,
            limit=args.limit))
    verb = args.verb
    if verb == "add":
        return await a.with_manager(args.kubeconfig, lambda m: a.cluster_add(
            m, name=args.name, kubeconfig_file=args.worker_kubeconfig, quota=args.quota,
            labels=args.label, local_queue=args.local_queue, cluster_queue=args.cluster_queue,
            namespace=args.namespace, allow_insecure=args.allow_insecure, console=console))
    if verb == "rotate-credentials":
        return await a.with_manager(args.kubeconfig, lambda m: a.cluster_rotate(
            m, name=args.name, kubeconfig_file=args.worker_kubeconfig,
            namespace=args.namespace, allow_insecure=args.allow_insecure, console=console))
    if verb == "list":
        return await a.with_manager(args.kubeconfig,
                                    lambda m: a.cluster_list(m, console=console))
    specs = {"cordon": ({"cordoned": True}, "cordoned"),
             "uncordon": ({"cordoned": False, "drain": False}, "uncordoned"),
             "drain": ({"cordoned": True, "drain": True}, "draining")}
    spec, done = specs[verb]
    return await a.with_manager(args.kubeconfig, lambda m: a.cluster_set(
        m, name=args.name, spec=spec, console=console, done=done))


async def _until_signalled(work: Awaitable[None]) -> None:
    """Run `work` until it ends or SIGTERM/SIGINT cancels it (a clean stop)."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await work


def _devkit(module: str) -> Any:
    """A module of the local development kit, which the service's image does not ship."""
    try:
        return importlib.import_module(f"devkit.{module}")
    except ImportError as error:
        raise CliError(f"`demo` and `up` need the development kit ({error}): install the "
                       "project from its source with `pip install -e '.[devkit]'`") from None


async def _run_up(args: argparse.Namespace) -> None:
    run_up = _devkit("localenv").run_up
    await _until_signalled(run_up(directory=args.directory, port=args.port,
                                  run_seconds=args.jobs_seconds,
                                  kueue=getattr(args, "kueue", False)))


def _up(args: argparse.Namespace) -> int:
    localenv = _devkit("localenv")

    args.directory = getattr(args, "directory", None) or localenv.default_directory()
    try:
        asyncio.run(_run_up(args))
    except localenv.AlreadyUp as error:
        if error.info.get("kubeconfigs"):
            print(localenv.describe(error.info))
        raise CliError(str(error)) from None
    except localenv.PortInUse as error:
        raise CliError(str(error)) from None
    return 0


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

    await _until_signalled(Dispatcher(config).run())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dispatcher.observability.logging import setup_logging

    try:
        if args.command == "run":
            config = load_config(args.config)
            setup_logging(json_logs=args.json_logs or config.json_logs)
            asyncio.run(_run_service(config))
            return 0
        if args.command == "logs":
            try:
                return asyncio.run(logs_cli.run(args))
            except logs_cli.LogsError as error:
                raise CliError(str(error)) from None
        if args.command in ("cluster", "jobs"):
            from dispatcher.admin_cli import AdminError

            try:
                return asyncio.run(_admin(args))
            except AdminError as error:
                raise CliError(str(error)) from None
        if args.command == "up" or (args.command == "demo" and args.stay):
            setup_logging(json_logs=False, level=30)
            return _up(args)
        if args.command == "demo":
            run_demo = _devkit("demo").run_demo
            setup_logging(json_logs=False, level=30)
            return int(asyncio.run(run_demo(run_seconds=args.jobs_seconds, port=args.port)))
    except CliError as error:
        print(f"dispatcher: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
