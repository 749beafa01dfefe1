"""What the tests of the dispatcher on workers with real Kueue share.

Queues for one test on a worker, jobs on the hub (the dispatcher's manager) and local
jobs straight on a worker, reads of the manager job, its Dispatched condition and the
worker's Workloads, and a watch that records, over a whole test, how many copies of
each job ran at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from devkit.factories import trainjob
from devkit.localcluster.kueue_objects import WORKLOADS, setup_queues
from devkit.localcluster.trainer import kwok_patch
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.informer import DELETED
from dispatcher.kube.resource import Resource
from tests.integration.conftest import DEFAULT_QUOTA, watching
from tests.integration.kueue.conftest import (
    DISPATCHER_MANAGER,
    HubDispatchers,
    KueueClusters,
    conditions,
    is_true,
)

LOCAL_QUEUE = "team"
StartOnHub = HubDispatchers
PREEMPT_LOWER_PRIORITY = {"withinClusterQueue": "LowerPriority"}


def worker(clusters: KueueClusters, name: str, **extra: Any) -> dict[str, Any]:
    kubeconfig = str(clusters.plane.clusters[name].kubeconfig_path)
    return {"name": name, "kubeconfig": kubeconfig, "quota": DEFAULT_QUOTA, **extra}


async def queues(clusters: KueueClusters, worker_name: str, namespace: str,
                 quota: dict[str, str], *, suffix: str = "", **options: Any) -> str:
    """A ClusterQueue of its own for this test on the worker, and the LocalQueue (only
    for the queue without a suffix)."""
    name = f"cq-{namespace}{suffix}"
    await setup_queues(clusters.clients[worker_name], cluster_queue_name=name,
                       local_queue_name=LOCAL_QUEUE if not suffix else f"lq{suffix}",
                       namespaces=[namespace], quota=quota, **options)
    return name


def long_running(seconds: float) -> list[dict[str, Any]]:
    """A job's runtime patch: its pods run for `seconds` on the worker's kwok nodes."""
    return [kwok_patch(run_seconds=seconds)]


async def create(clusters: KueueClusters, namespace: str, name: str, **kwargs: Any) -> None:
    """A TrainJob on the hub, for the dispatcher."""
    await Resource(clusters.clients[DISPATCHER_MANAGER], TRAINJOBS).create(
        trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE, **kwargs),
        namespace=namespace)


async def create_local(clusters: KueueClusters, worker_name: str, namespace: str, name: str,
                       *, labels: dict[str, str] | None = None, **kwargs: Any) -> None:
    """A TrainJob of the worker's own users, submitted to its Kueue."""
    await Resource(clusters.clients[worker_name], TRAINJOBS).create(
        trainjob(name, namespace, labels={c.LABEL_KUEUE_QUEUE: LOCAL_QUEUE, **(labels or {})},
                 **kwargs), namespace=namespace)


async def manager_job(clusters: KueueClusters, namespace: str, name: str
                      ) -> dict[str, Any] | None:
    return await Resource(clusters.clients[DISPATCHER_MANAGER], TRAINJOBS).get(
        name, namespace=namespace)


async def placed_on(clusters: KueueClusters, namespace: str, name: str) -> str:
    job = await manager_job(clusters, namespace, name) or {"metadata": {}}
    return str((job["metadata"].get("annotations") or {}).get(c.ANNOTATION_CLUSTER, ""))


async def dispatched(clusters: KueueClusters, namespace: str, name: str) -> dict[str, Any]:
    return conditions(await manager_job(clusters, namespace, name)).get(
        c.CONDITION_DISPATCHED, {})


async def finished(clusters: KueueClusters, namespace: str, name: str
                   ) -> dict[str, Any] | None:
    found = conditions(await manager_job(clusters, namespace, name))
    for type_ in ("Complete", "Failed"):
        if found.get(type_, {}).get("status") == "True":
            return found[type_]
    return None


async def workloads(clusters: KueueClusters, worker_name: str, namespace: str
                    ) -> list[dict[str, Any]]:
    listed = await Resource(clusters.clients[worker_name], WORKLOADS).list(namespace=namespace)
    return list(listed["items"])


async def admitted_count(clusters: KueueClusters, worker_name: str, namespace: str) -> int:
    """How many of the namespace's Workloads on the worker its Kueue has admitted."""
    return sum(is_true(wl, "Admitted") for wl in await workloads(clusters, worker_name,
                                                                 namespace))


async def mirrors(clusters: KueueClusters, worker_name: str, namespace: str
                  ) -> list[dict[str, Any]]:
    listed = await Resource(clusters.clients[worker_name], TRAINJOBS).list(
        namespace=namespace, label_selector=c.LABEL_ORIGIN)
    return list(listed["items"])


@dataclass
class RunningCopies:
    """The most copies of each job (by name) seen running at once across the workers."""

    most: dict[str, int] = field(default_factory=dict)
    running: dict[str, set[str]] = field(default_factory=dict)

    def seen(self, worker: str, event_type: str, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        copies = self.running.setdefault(name, set())
        is_running = (event_type != DELETED and not (job.get("spec") or {}).get("suspend")
                      and TrainJobKind().running(job))
        (copies.add if is_running else copies.discard)(worker)
        self.most[name] = max(self.most.get(name, 0), len(copies))


@contextlib.asynccontextmanager
async def watch_running(clusters: KueueClusters, workers: tuple[str, ...], namespace: str
                        ) -> AsyncIterator[RunningCopies]:
    record = RunningCopies()
    async with contextlib.AsyncExitStack() as stack:
        for name in workers:
            await stack.enter_async_context(watching(
                clusters.clients[name], namespace,
                lambda kind, job, name=name: record.seen(name, kind, job)))
        yield record
