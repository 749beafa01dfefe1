"""`dispatcher cluster ...` and `dispatcher jobs`: administering workers and reading jobs.

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
from dispatcher.api import constants as c
from dispatcher.api.jobstate import job_state
from dispatcher.api.trainer import GROUP, TRAINJOBS, VERSION
from dispatcher.api.workercluster import WORKER_CLUSTERS
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.kubeconfig import KubeconfigError, parse_kubeconfig
from dispatcher.kube.resource import Resource, message_of, status_of
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


def _active(obj: dict[str, Any]) -> dict[str, Any]:
    return next((x for x in (obj.get("status") or {}).get("conditions") or []
                 if x.get("type") == c.CONDITION_ACTIVE), {})


def _amounts(mapping: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((mapping or {}).items())) or "-"


async def cluster_list(manager: ClusterClient, *, console: Console) -> int:
    listed = await Resource(manager, WORKER_CLUSTERS).list()
    table = Table(title="Worker clusters")
    for column in ("Name", "Active", "Reason", "Quota", "Used", "Mirrors", "Flags"):
        table.add_column(column)
    for obj in sorted(listed["items"], key=lambda o: o["metadata"]["name"]):
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        active = _active(obj)
        flags = ", ".join(f for f in ("cordoned", "drain") if spec.get(f)) or "-"
        table.add_row(obj["metadata"]["name"], active.get("status", "Unknown"),
                      f"{active.get('reason', '')}: {active.get('message', '')}".strip(": "),
                      _amounts(status.get("quota") or spec.get("quota")),
                      _amounts(status.get("used")), str(status.get("mirrors", 0)), flags)
    console.print(table)
    return 0


async def jobs_list(manager: ClusterClient, *, namespace: str | None, managed_by: str,
                    console: Console) -> int:
    listed = await Resource(manager, TRAINJOBS).list(namespace=namespace)
    table = Table(title="Claimed TrainJobs")
    for column in ("Namespace", "Name", "Worker", "State", "Why / where"):
        table.add_column(column)
    for job in sorted(listed["items"], key=lambda j: (j["metadata"]["namespace"],
                                                      j["metadata"]["name"])):
        if (job.get("spec") or {}).get("managedBy") != managed_by:
            continue
        state = job_state(job, managed_by=managed_by)
        table.add_row(job["metadata"]["namespace"], job["metadata"]["name"],
                      state.worker or "-", state.state, state.message)
    console.print(table)
    return 0

