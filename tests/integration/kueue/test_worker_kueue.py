"""The dispatcher's mirrors meet a worker's real Kueue (`localQueue`, `clusterQueue`).

Real API servers, real Kueue on the workers, the real Trainer chain (Trainer, JobSet
and Job controllers, kwok as the kubelet): nothing here writes a controller's status by
hand. The dispatcher's manager is the plane's `hub`, without
Kueue (see conftest). The room the dispatcher sees on a worker comes from the worker's
Workloads and ClusterQueues as Kueue keeps them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from fractions import Fraction
from typing import Any

import pytest

from dispatcher.api import constants as c
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.app import Dispatcher
from dispatcher.kube.resource import Resource
from tests.integration.conftest import eventually, settled, watching
from tests.integration.kueue.conftest import KueueClusters, conditions, is_true
from tests.integration.kueue.helpers import (
    LOCAL_QUEUE,
    StartOnHub,
    admitted_count,
    create,
    dispatched,
    finished,
    long_running,
    mirrors,
    placed_on,
    queues,
    worker,
    workloads,
)

pytestmark = pytest.mark.integration
BIG_QUOTA = {"cpu": "8", "memory": "64Gi"}
GIB = 2**30


@contextlib.asynccontextmanager
async def suspend_history(clusters: KueueClusters, worker_name: str, namespace: str
                          ) -> AsyncIterator[list[tuple[str, bool]]]:
    """Every (event, spec.suspend) the worker's watch shows for its TrainJobs."""
    seen: list[tuple[str, bool]] = []
    async with watching(clusters.clients[worker_name], namespace, lambda kind, job: seen.append(
            (kind, bool((job.get("spec") or {}).get("suspend"))))):
        yield seen


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
        done = await eventually(lambda: finished(kueue_clusters, ns, "admitted"), timeout=30)
    assert admitted_by[0] == cq
    assert done["type"] == "Complete"
    # Created suspended (Kueue's webhook), unsuspended only by its admission.
    assert seen[0] == ("ADDED", True), seen
    assert ("MODIFIED", False) in seen, seen


def room(dispatcher: Dispatcher, name: str) -> Any:
    assert dispatcher.registry is not None
    return dispatcher.capacities.of(dispatcher.registry.workers[name])


async def test_live_room_is_read_from_a_real_cluster_queue_and_its_workloads(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    cq = await queues(kueue_clusters, "worker-b", ns, {"cpu": "4", "memory": "64Gi"})
    dispatcher = await dispatchers(workers={"static": [worker(
        kueue_clusters, "worker-b", localQueue=LOCAL_QUEUE, clusterQueue=cq)]})
    before = room(dispatcher, "worker-b")
    assert before.quota == {"cpu": Fraction(4), "memory": Fraction(64 * GIB)}
    assert before.free == before.quota and before.used == {}
    # Three 2-CPU jobs that run long: the real ClusterQueue (4 CPU) holds two.
    for name in ("live-0", "live-1", "live-2"):
        await create(kueue_clusters, ns, name, num_nodes=2, runtime_patches=long_running(60))

    async def two_admitted() -> bool:
        return await admitted_count(kueue_clusters, "worker-b", ns) == 2
    await eventually(two_admitted, timeout=30, interval=0.2)
    await settled(dispatcher)
    assert len(await mirrors(kueue_clusters, "worker-b", ns)) == 2
    waiting = [n for n in ("live-0", "live-1", "live-2")
               if not await placed_on(kueue_clusters, ns, n)]
    assert len(waiting) == 1
    after = room(dispatcher, "worker-b")
    # Both admitted mirrors are ours: booked once, nothing used by others.
    assert after.used_by_us == {"cpu": Fraction(4), "memory": Fraction(8 * GIB),
                                "pods": Fraction(4)}
    assert after.used_by_others == {}
    assert after.free == {"cpu": Fraction(0), "memory": Fraction(56 * GIB)}


async def test_a_mirror_that_does_not_fit_the_worker_queue_says_it_waits_for_admission(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    """The dispatcher's declared quota says yes, the worker's Kueue says no: the mirror
    is placed and stays suspended, and the manager job says why, in Kueue's words."""
    ns = kueue_namespace
    cq = await queues(kueue_clusters, "worker-a", ns, {"cpu": "1", "memory": "64Gi"})
    await dispatchers(workers={"static": [worker(kueue_clusters, "worker-a",
                                                 localQueue=LOCAL_QUEUE)]},
                      placement={"admissionTimeoutSeconds": 0})
    await create(kueue_clusters, ns, "too-big", num_nodes=2)

    async def waiting() -> dict[str, Any] | None:
        cond = await dispatched(kueue_clusters, ns, "too-big")
        return cond if "insufficient" in cond.get("message", "") else None
    cond = await eventually(waiting, timeout=30, interval=0.2)
    assert cond["status"] == "True" and cond["reason"] == c.REASON_WAITING_FOR_ADMISSION
    assert cond["message"].startswith(
        f"placed on worker worker-a, waiting for admission in LocalQueue {LOCAL_QUEUE}: "
        "couldn't assign flavors"), cond["message"]
    mirror = await Resource(kueue_clusters.clients["worker-a"], TRAINJOBS).get(
        "too-big", namespace=ns)
    assert mirror is not None and mirror["spec"]["suspend"] is True
    [workload] = await workloads(kueue_clusters, "worker-a", ns)
    assert not is_true(workload, "Admitted")
    assert conditions(workload)["QuotaReserved"]["message"] in cond["message"]
    assert cq  # named only by the worker's LocalQueue here
