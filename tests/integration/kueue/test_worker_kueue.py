"""The dispatcher's mirrors meet a worker's real Kueue (`localQueue`, `clusterQueue`).

Real API servers, real Kueue on the workers, the simulated trainer: nothing here writes
a controller's status by hand. The dispatcher's manager is the plane's
`hub`, without Kueue (see conftest).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from fractions import Fraction
from typing import Any

import pytest
import pytest_asyncio

from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.app import Dispatcher
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import Resource
from dispatcher.localcluster.kueue_objects import CLUSTER_QUEUES, WORKLOADS, setup_queues
from tests.factories import trainjob
from tests.integration.conftest import DEFAULT_QUOTA, DispatcherRunner, eventually
from tests.integration.kueue.conftest import (
    DISPATCHER_MANAGER,
    KueueClusters,
    conditions,
    is_true,
)

pytestmark = pytest.mark.integration
LOCAL_QUEUE = "team"
BIG_QUOTA = {"cpu": "8", "memory": "64Gi"}
StartOnHub = Callable[..., Awaitable[Dispatcher]]


@pytest_asyncio.fixture
async def dispatchers(kueue_clusters: KueueClusters, kueue_namespace: str
                      ) -> AsyncIterator[StartOnHub]:
    """Start dispatchers whose manager is the hub; all are stopped at the end."""
    runner = DispatcherRunner(kueue_clusters.plane, kueue_namespace)
    hub = kueue_clusters.plane.clusters[DISPATCHER_MANAGER].kubeconfig()

    async def start(**overrides: Any) -> Dispatcher:
        return await runner(manager_kubeconfig=hub, **overrides)
    yield start
    await runner.stop()


def worker(clusters: KueueClusters, name: str, **extra: Any) -> dict[str, Any]:
    kubeconfig = str(clusters.plane.clusters[name].kubeconfig_path)
    return {"name": name, "kubeconfig": kubeconfig, "quota": DEFAULT_QUOTA, **extra}


async def queues(clusters: KueueClusters, worker_name: str, namespace: str,
                 quota: dict[str, str]) -> str:
    """A ClusterQueue of its own for this test on the worker, and the LocalQueue."""
    name = f"cq-{namespace}"
    await setup_queues(clusters.clients[worker_name], cluster_queue_name=name,
                       local_queue_name=LOCAL_QUEUE, namespaces=[namespace], quota=quota)
    return name


async def create(clusters: KueueClusters, namespace: str, name: str, **kwargs: Any) -> None:
    await Resource(clusters.clients[DISPATCHER_MANAGER], TRAINJOBS).create(
        trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE, **kwargs),
        namespace=namespace)


@contextlib.asynccontextmanager
async def suspend_history(clusters: KueueClusters, worker_name: str, namespace: str
                          ) -> AsyncIterator[list[tuple[str, bool]]]:
    """Every (event, spec.suspend) the worker's watch shows for its TrainJobs."""
    seen: list[tuple[str, bool]] = []
    informer = Informer(Resource(clusters.clients[worker_name], TRAINJOBS), namespace=namespace)
    informer.add_handler(
        lambda kind, job: seen.append((kind, bool((job.get("spec") or {}).get("suspend")))))
    task = asyncio.create_task(informer.run(), name="test/suspend-history")
    try:
        await asyncio.wait_for(informer.synced.wait(), timeout=10)
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def manager_job(clusters: KueueClusters, namespace: str, name: str
                      ) -> dict[str, Any] | None:
    return await Resource(clusters.clients[DISPATCHER_MANAGER], TRAINJOBS).get(
        name, namespace=namespace)


async def workloads(clusters: KueueClusters, worker_name: str, namespace: str
                    ) -> list[dict[str, Any]]:
    listed = await Resource(clusters.clients[worker_name], WORKLOADS).list(namespace=namespace)
    return list(listed["items"])


async def test_mirror_waits_suspended_for_admission_then_completes(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    cq = await queues(kueue_clusters, "worker-a", ns, BIG_QUOTA)
    await dispatchers(workers={"static": [worker(kueue_clusters, "worker-a",
                                                 localQueue=LOCAL_QUEUE)]})
    admitted_by: list[str] = []

    async def admitted() -> bool:
        for wl in await workloads(kueue_clusters, "worker-a", ns):
            if is_true(wl, "Admitted"):
                admitted_by.append(wl["status"]["admission"]["clusterQueue"])
        return bool(admitted_by)

    async with suspend_history(kueue_clusters, "worker-a", ns) as seen:
        await create(kueue_clusters, ns, "admitted")
        await eventually(admitted, timeout=30, interval=0.1)
        done = await eventually(
            lambda: _finished(kueue_clusters, ns, "admitted"), timeout=30)
    assert admitted_by[0] == cq
    assert done["type"] == "Complete"
    # Created suspended (Kueue's webhook), unsuspended only by its admission.
    assert seen[0] == ("ADDED", True), seen
    assert ("MODIFIED", False) in seen, seen


async def _finished(clusters: KueueClusters, namespace: str, name: str
                    ) -> dict[str, Any] | None:
    found = conditions(await manager_job(clusters, namespace, name))
    for type_ in ("Complete", "Failed"):
        if found.get(type_, {}).get("status") == "True":
            return found[type_]
    return None


async def test_live_quota_is_read_from_a_real_cluster_queue(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    cq = await queues(kueue_clusters, "worker-b", ns, {"cpu": "4", "memory": "64Gi"})
    dispatcher = await dispatchers(workers={"static": [worker(
        kueue_clusters, "worker-b", localQueue=LOCAL_QUEUE, clusterQueue=cq)]})
    assert dispatcher.registry is not None
    state = dispatcher.registry.workers["worker-b"]
    assert state.live_quota == {"cpu": Fraction(4), "memory": Fraction(64 * 2**30)}
    assert not any((state.live_used or {}).values()), state.live_used
    # Three 2-CPU jobs that run long: the real ClusterQueue (4 CPU) holds two.
    long_run = {"simulated-trainer/run-seconds": "60"}
    for name in ("live-0", "live-1", "live-2"):
        await create(kueue_clusters, ns, name, num_nodes=2, annotations=long_run)

    async def usage() -> dict[str, Any] | None:
        queue = await Resource(kueue_clusters.clients["worker-b"], CLUSTER_QUEUES).get(cq)
        flavors = ((queue or {}).get("status") or {}).get("flavorsUsage") or []
        cpu = [r["total"] for f in flavors for r in f["resources"] if r["name"] == "cpu"]
        return queue if cpu == ["4"] else None
    await eventually(usage, timeout=30, interval=0.2)
    await eventually(lambda: _async(state.live_used == {"cpu": Fraction(4),
                                                        "memory": Fraction(8 * 2**30)}))
    await asyncio.sleep(2.0)
    mirrors = await Resource(kueue_clusters.clients["worker-b"], TRAINJOBS).list(namespace=ns)
    assert len(mirrors["items"]) == 2, [m["metadata"]["name"] for m in mirrors["items"]]
    waiting = [n for n in ("live-0", "live-1", "live-2")
               if not ((await manager_job(kueue_clusters, ns, n)) or {})["metadata"].get(
                   "annotations", {}).get(c.ANNOTATION_CLUSTER)]
    assert len(waiting) == 1



async def test_a_mirror_that_does_not_fit_the_worker_queue_stays_suspended(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    """The dispatcher's declared quota says yes, the worker's Kueue says no: the mirror
    is placed and stays suspended, its Workload pending for quota."""
    ns = kueue_namespace
    await queues(kueue_clusters, "worker-a", ns, {"cpu": "1", "memory": "64Gi"})
    await dispatchers(workers={"static": [worker(kueue_clusters, "worker-a",
                                                 localQueue=LOCAL_QUEUE)]})
    await create(kueue_clusters, ns, "too-big", num_nodes=2)

    async def pending_workload() -> dict[str, Any] | None:
        for wl in await workloads(kueue_clusters, "worker-a", ns):
            reserved = conditions(wl).get("QuotaReserved", {})
            if reserved.get("status") == "False" and reserved.get("reason") == "Pending":
                return wl
        return None
    workload = await eventually(pending_workload, timeout=30, interval=0.2)
    await asyncio.sleep(3.0)
    mirror = await Resource(kueue_clusters.clients["worker-a"], TRAINJOBS).get(
        "too-big", namespace=ns)
    assert mirror is not None and mirror["spec"]["suspend"] is True
    assert not is_true(workload, "Admitted")
    assert "insufficient" in conditions(workload)["QuotaReserved"]["message"].lower()
    job = await manager_job(kueue_clusters, ns, "too-big")
    assert job is not None
    assert job["metadata"]["annotations"][c.ANNOTATION_CLUSTER] == "worker-a"
    # Today the manager's job says only where it went (the annotation above): no status
    # is copied from a suspended mirror, so nothing on it says "waiting for the worker's
    # Kueue". Pinned here so that the day it says so, this test is updated with it.
    assert not (job.get("status") or {}).get("conditions"), job.get("status")


async def _async(value: bool) -> bool:
    return value
