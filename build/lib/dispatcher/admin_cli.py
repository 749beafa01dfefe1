"""`dispatcher cluster ...` and `dispatcher jobs`: administering workers and reading jobs.

`cluster list` and `jobs` show what the status page shows, through the same
`observability.statusview` functions, from the objects they list on the manager: the
jobs the one claim rule (`dispatcher.claim`) claims, with the scheduler's priority
lookup (`controllers.jobs.priority`).

Every command talks to the manager named by `--kubeconfig` (default `$KUBECONFIG`, then
`~/.kube/config`). `cluster add` and `cluster rotate-credentials` first prove the new
kubeconfig works: it is validated, a client connects, and the worker must serve the
TrainJob API, before anything is written.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from dispatcher.admin import register_worker, store_kubeconfig
from dispatcher.api.placement import PLACEMENTS, placements_of, record_of
from dispatcher.api.trainer import GROUP, VERSION
from dispatcher.api.workercluster import WORKER_CLUSTERS
from dispatcher.claim import Claim
from dispatcher.clock import SystemClock
from dispatcher.controllers.jobs.priority import PriorityCache
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.informer import object_key
from dispatcher.kube.kubeconfig import KubeconfigError, parse_kubeconfig
from dispatcher.kube.resource import EVENTS, Resource, message_of, status_of
from dispatcher.observability.events import CONTROLLER
from dispatcher.observability.statusview import (
    JobRow,
    WorkerRow,
    build_view,
    worker_row_from_object,
)
from dispatcher.placement.validation import DemandError, checked_quantities


class AdminError(Exception):
    """A problem to report as one line."""


def manager_kubeconfig_path(explicit: Path | None) -> Path:
    if explicit:
        return explicit
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(env) if env else Path.home() / ".kube" / "config"


async def _client(kubeconfig: dict[str, Any], name: str) -> ClusterClient:
    return await ClusterClient.from_kubeconfig(
        name=name, kubeconfig=kubeconfig,
        settings=ClientSettings(qps=50, burst=50, timeout_seconds=10))


async def with_manager(path: Path | None,
                       action: Callable[[ClusterClient], Awaitable[int]]) -> int:
    file = manager_kubeconfig_path(path)
    try:
        kubeconfig = yaml.safe_load(await asyncio.to_thread(file.read_text))
    except OSError as error:
        raise AdminError(f"cannot read the manager kubeconfig {file}: {error.strerror}") from None
    client = await _client(kubeconfig, "manager")
    try:
        return await action(client)
    except AdminError:
        raise
    except Exception as error:
        raise AdminError(f"manager API: {message_of(error)}") from None
    finally:
        await client.close()


def parse_pairs(text: str, what: str) -> dict[str, str]:
    pairs = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AdminError(f"{what}: expected key=value, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


async def checked_kubeconfig(file: Path, *, allow_insecure: bool) -> dict[str, Any]:
    """Parse, connect, and check the worker serves TrainJobs; raise AdminError if not."""
    try:
        text = await asyncio.to_thread(file.read_text)
        kubeconfig = parse_kubeconfig(text, allow_insecure=allow_insecure)
    except OSError as error:
        raise AdminError(f"cannot read {file}: {error.strerror}") from None
    except KubeconfigError as error:
        raise AdminError(f"{file}: {error}") from None
    client = await _client(kubeconfig, "worker")
    try:
        await client.request("GET", f"/apis/{GROUP}/{VERSION}")
    except Exception as error:
        if status_of(error) == 404:
            raise AdminError(f"the worker does not serve {GROUP}/{VERSION}: install the "
                             "Kubeflow Trainer CRDs there first") from None
        raise AdminError(f"cannot use the worker's API server: {message_of(error)}") from None
    finally:
        await client.close()
    return kubeconfig


async def cluster_add(manager: ClusterClient, *, name: str, kubeconfig_file: Path,
                      quota: str, labels: str, local_queue: str, cluster_queue: str,
                      namespace: str, allow_insecure: bool, console: Console) -> int:
    quota_map = parse_pairs(quota, "--quota")
    try:
        checked_quantities(quota_map, path="--quota")
    except DemandError as error:
        raise AdminError(str(error)) from None
    kubeconfig = await checked_kubeconfig(kubeconfig_file, allow_insecure=allow_insecure)
    await register_worker(manager, namespace=namespace, name=name, kubeconfig=kubeconfig,
                          quota=quota_map, labels=parse_pairs(labels, "--label"),
                          local_queue=local_queue, cluster_queue=cluster_queue)
    console.print(f"worker {name} registered")
    return 0


async def cluster_rotate(manager: ClusterClient, *, name: str, kubeconfig_file: Path,
                         namespace: str, allow_insecure: bool, console: Console) -> int:
    worker = await Resource(manager, WORKER_CLUSTERS).get(name)
    if worker is None:
        raise AdminError(f"WorkerCluster {name} not found")
    kubeconfig = await checked_kubeconfig(kubeconfig_file, allow_insecure=allow_insecure)
    await store_kubeconfig(manager, namespace=namespace, worker=name, kubeconfig=kubeconfig)
    console.print(f"credentials of worker {name} rotated; the dispatcher reconnects with them")
    return 0


async def cluster_set(manager: ClusterClient, *, name: str, spec: dict[str, Any],
                      console: Console, done: str) -> int:
    workers = Resource(manager, WORKER_CLUSTERS)
    if await workers.get(name) is None:
        raise AdminError(f"WorkerCluster {name} not found")
    await workers.merge_patch(name, {"spec": spec})
    console.print(f"worker {name} {done}")
    return 0


def _amounts(view: WorkerRow, what: str) -> str:
    values = ((b.resource, getattr(b, what)) for b in view.resources)
    shown = (None, "0") if what == "used_by_others" else (None,)
    return ", ".join(f"{k}={v}" for k, v in values if v not in shown) or "-"


async def cluster_list(manager: ClusterClient, *, console: Console) -> int:
    listed = await Resource(manager, WORKER_CLUSTERS).list()
    table = Table(title="Worker clusters")
    for column in ("Name", "Active", "Reason", "Quota", "Used", "By others", "Free",
                   "Mirrors", "Flags"):
        table.add_column(column)
    for row in sorted(map(worker_row_from_object, listed["items"]), key=lambda w: w.name):
        table.add_row(row.name, row.active, f"{row.reason}: {row.message}".strip(": "),
                      _amounts(row, "quota"), _amounts(row, "used"),
                      _amounts(row, "used_by_others"), _amounts(row, "free"),
                      str(row.mirrors), row.flags)
    console.print(table)
    return 0


async def _priorities(manager: ClusterClient, jobs: list[dict[str, Any]]) -> dict[str, int]:
    """Each job's priority as the scheduler sees it (the classes and runtimes listed once)."""
    kind, cache = TrainJobKind(), PriorityCache(manager, clock=SystemClock())
    runtimes: dict[tuple[str, str], dict[str, Any]] = {}
    for runtime_kind, resource in kind.runtime_resources.items():
        for runtime in (await Resource(manager, resource).list())["items"]:
            runtimes[(runtime_kind, object_key(runtime))] = runtime
    priorities = {}
    for job in jobs:
        runtime = runtimes.get(kind.runtime_ref(job))
        try:
            pods_class = kind.pods_priority_class(kind.parse_runtime(runtime)) if runtime else ""
        except DemandError:
            pods_class = ""
        priorities[object_key(job)] = (await cache.priority(job, pods_class=pods_class)).value
    return priorities


async def _dispatcher_events(manager: ClusterClient, namespace: str | None
                             ) -> list[dict[str, Any]]:
    listed = await Resource(manager, EVENTS).list(namespace=namespace)
    return [e for e in listed["items"] if e.get("reportingController") == CONTROLLER]


def _jobs_table(title: str, rows: list[JobRow], *, position: bool = False,
                worker: bool = True) -> Table:
    table = Table(title=title)
    columns = (["#"] if position else []) + ["Namespace", "Name"] + (
        ["Worker"] if worker else []) + ["State", "Why / where"]
    for column in columns:
        table.add_column(column)
    for row in rows:
        cells = ([str(row.position)] if position else []) + [row.namespace, row.name] + (
            [row.worker or "-"] if worker else []) + [row.state, row.message]
        table.add_row(*cells)
    return table


async def _placements(manager: ClusterClient, dispatcher_namespace: str) -> dict[str, str]:
    """Job UID -> worker of every placed job, from the dispatcher's Placement records (the
    job's own `cluster` annotation is the user's to write, so it is never read)."""
    listed = await Resource(manager, PLACEMENTS).list(namespace=dispatcher_namespace)
    return placements_of(map(record_of, listed["items"]))


async def jobs_list(manager: ClusterClient, *, namespace: str | None, claim: Claim,
                    dispatcher_namespace: str, console: Console,
                    limit: int | None = None) -> int:
    """The queue in order, the placed jobs, the held and finished ones, the counts and
    the recent activity: the status page's view, built from the listed objects."""
    kind = TrainJobKind()
    jobs = (await Resource(manager, kind.kind).list(namespace=namespace))["items"]
    claimed = [job for job in jobs if claim.claims(job)]
    view = build_view(workers=[], jobs=claimed, claim=claim, kind=kind,
                      placements=await _placements(manager, dispatcher_namespace),
                      priorities=await _priorities(manager, claimed),
                      events=await _dispatcher_events(manager, namespace), limit=limit)
    console.print(_jobs_table(f"Queue ({view.queue.total} waiting)", view.queue.items,
                              position=True, worker=False))
    console.print(_jobs_table(f"Placed ({view.placed.total})", view.placed.items))
    console.print(_jobs_table(f"Held and finished ({view.others.total})", view.others.items,
                              worker=False))
    counts = ", ".join(f"{k}={v}" for k, v in view.by_state.items()) or "none"
    console.print(f"Claimed TrainJobs by state: {counts}")
    if view.by_reason:
        console.print("Why they wait: " + ", ".join(
            f"{k}={v}" for k, v in view.by_reason.items()))
    if view.recent:
        recent = Table(title="Recent placements, evictions and rejections")
        for column in ("Time", "Reason", "TrainJob", "Message"):
            recent.add_column(column)
        for a in view.recent:
            recent.add_row(a.time[:19].replace("T", " "), a.reason,
                           f"{a.namespace}/{a.name}", a.message)
        console.print(recent)
    return 0
