"""`dispatcher logs NAMESPACE/NAME`: a job's pod logs, from the worker where it ran.

The command asks the dispatcher's logs endpoint (`logs_endpoint.py`; `--server`, or
`$DISPATCHER_LOGS_URL`) with the caller's own manager token: `--token`, else the bearer
token of the kubeconfig's current user (a token, a token file or an exec plugin, as
kubectl reads them). The dispatcher reads the logs with its own worker credentials, so
the caller needs none; a kubeconfig whose user is a client certificate cannot hand its
identity on and is told so. The options are `kubectl logs`'s. A standby replica
(several behind one Service) answers 503; the command asks again a few times, as the
next connection may reach the leader.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

import aiohttp

DEFAULT_SERVER = "http://127.0.0.1:8082"
_STANDBY_ATTEMPTS = 5
_STANDBY_PAUSE_SECONDS = 0.5
_DURATION = re.compile(r"^(\d+)([smh])$")


class LogsError(Exception):
    """A problem to report as one line."""


def add_parser(commands: Any) -> None:
    logs = commands.add_parser(
        "logs", help="a job's pod logs, read by the dispatcher on the worker where it ran")
    logs.add_argument("job", metavar="NAMESPACE/NAME")
    logs.add_argument("-f", "--follow", action="store_true", help="stream new lines")
    logs.add_argument("--replicated-job", default=None, help="only this replicated job's pods")
    logs.add_argument("--node-rank", type=int, default=None, help="only the pod of this rank")
    logs.add_argument("-c", "--container", default=None, help="only this container")
    logs.add_argument("--tail", type=int, default=None, help="the last N lines of each")
    logs.add_argument("--since", default=None, help="newer than a duration: 30s, 5m, 2h")
    logs.add_argument("--timestamps", action="store_true", help="each line's time")
    logs.add_argument("--server", default=os.environ.get("DISPATCHER_LOGS_URL", DEFAULT_SERVER),
                      help="the dispatcher's logs endpoint (default $DISPATCHER_LOGS_URL, "
                           f"{DEFAULT_SERVER})")
    logs.add_argument("--kubeconfig", type=Path, default=None,
                      help="the manager's kubeconfig, whose token is sent (default "
                           "$KUBECONFIG, ~/.kube/config)")
    logs.add_argument("--context", default=None, help="the kubeconfig context to use")
    logs.add_argument("--token", default=os.environ.get("DISPATCHER_TOKEN"),
                      help="a manager bearer token instead (default $DISPATCHER_TOKEN)")


def seconds_of(duration: str) -> int:
    match = _DURATION.match(duration.strip())
    if not match:
        raise LogsError(f"--since {duration!r}: a whole number and s, m or h (30s, 5m, 2h)")
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def query_of(args: argparse.Namespace) -> dict[str, str]:
    query: dict[str, str] = {}
    for key, value in (("container", args.container), ("replicatedJob", args.replicated_job),
                       ("nodeRank", args.node_rank), ("tailLines", args.tail)):
        if value is not None:
            query[key] = str(value)
    if args.since is not None:
        query["sinceSeconds"] = str(seconds_of(args.since))
    for key, on in (("follow", args.follow), ("timestamps", args.timestamps)):
        if on:
            query[key] = "true"
    return query


async def caller_token(kubeconfig: Path | None, context: str | None) -> str:
    """The bearer token of the kubeconfig's user, as kubectl would send it."""
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import ConfigException, load_kube_config

    configuration = Configuration()
    try:
        await load_kube_config(config_file=str(kubeconfig) if kubeconfig else None,
                               context=context, client_configuration=configuration)
    except (ConfigException, OSError) as error:
        raise LogsError(f"cannot read the kubeconfig: {error}") from None
    value = str(configuration.api_key.get("BearerToken") or "")
    token = value.removeprefix("Bearer ").strip()
    if not token:
        raise LogsError("the kubeconfig's user has no bearer token (a client certificate "
                        "cannot be handed on): pass --token, e.g. from `kubectl create "
                        "token`, or use a kubeconfig whose user has a token")
    return token


async def run(args: argparse.Namespace) -> int:
    namespace, slash, name = args.job.partition("/")
    if not slash or not namespace or not name:
        raise LogsError(f"{args.job!r}: say NAMESPACE/NAME")
    token = args.token or await caller_token(args.kubeconfig, args.context)
    url = f"{args.server.rstrip('/')}/logs/{namespace}/{name}"
    for attempt in range(_STANDBY_ATTEMPTS):
        if await _print_logs(url, query_of(args), token, job=args.job, server=args.server,
                             last=attempt == _STANDBY_ATTEMPTS - 1):
            return 0
        await asyncio.sleep(_STANDBY_PAUSE_SECONDS)
    return 2


async def _print_logs(url: str, query: dict[str, str], token: str, *, job: str, server: str,
                      last: bool) -> bool:
    """Print the logs; False when a standby replica answered (behind a Service, the
    next connection may reach the leader)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
                url, params=query, headers={"Authorization": f"Bearer {token}"}) as response:
            if response.status != 200:
                text = (await response.text()).strip()
                if response.status == 503 and "stands by" in text and not last:
                    return False
                raise LogsError(f"{job}: {text} (HTTP {response.status})")
            async for chunk in response.content.iter_any():
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
    except aiohttp.ClientError as error:
        raise LogsError(f"cannot reach the dispatcher at {server}: {error}") from None
    return True
