"""A worker's ClusterQueue as real Kueue keeps it: borrowing within a cohort, and the
queues that cannot be used (missing, inactive, not covering a resource), each with a
reason on the worker and on the jobs that would go there; a priority class a worker's
Kueue lacks keeps the job away from that worker, with a reason."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from devkit.localcluster.kueue_objects import (
    CLUSTER_QUEUES,
    WORKLOAD_PRIORITY_CLASSES,
    cluster_queue,
    workload_priority_class,
)
from dispatcher.api import constants as c
from dispatcher.app import Dispatcher
from dispatcher.kube.resource import Resource
from tests.integration.conftest import eventually, settled
from tests.integration.kueue.conftest import KueueClusters
from tests.integration.kueue.helpers import (
    LOCAL_QUEUE,
    StartOnHub,
    admitted_count,
    create,
    dispatched,
    finished,
    long_running,
    placed_on,
    queues,
    worker,
)

pytestmark = pytest.mark.integration


def worker_row(dispatcher: Dispatcher, name: str) -> Any:
    return next(w for w in dispatcher.status_view().workers if w.name == name)


async def test_a_queue_borrows_from_its_cohort_and_the_dispatcher_offers_it(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    cohort = f"cohort-{ns}"
    cq = await queues(kueue_clusters, "worker-a", ns, {"cpu": "2", "memory": "64Gi"},
                      cohort=cohort)
    await queues(kueue_clusters, "worker-a", ns, {"cpu": "4", "memory": "0"}, suffix="-lender",
                 cohort=cohort)
    dispatcher = await dispatchers(workers={"static": [worker(
        kueue_clusters, "worker-a", localQueue=LOCAL_QUEUE, clusterQueue=cq)]})
    assert dispatcher.registry is not None
    room = dispatcher.capacities.of(dispatcher.registry.workers["worker-a"])
    assert room.quota["cpu"] == 2 and room.ceiling["cpu"] == 6 and room.free["cpu"] == 6
    names = [f"borrow-{i}" for i in range(4)]
    for name in names:
        await create(kueue_clusters, ns, name, num_nodes=2, runtime_patches=long_running(60))

    async def three_admitted() -> bool:
        return await admitted_count(kueue_clusters, "worker-a", ns) == 3
    await eventually(three_admitted, timeout=30, interval=0.2)
    await settled(dispatcher)
    placed = [await placed_on(kueue_clusters, ns, name) for name in names]
    assert sorted(placed) == ["", "worker-a", "worker-a", "worker-a"]
    waiting = names[placed.index("")]

    async def shown_waiting() -> bool:  # once its wait has lasted the quiet period
        shown = await dispatched(kueue_clusters, ns, waiting)
        return shown.get("reason") == c.REASON_WAITING_FOR_QUOTA
    await eventually(shown_waiting, timeout=10, interval=0.2)
    room = dispatcher.capacities.of(dispatcher.registry.workers["worker-a"])
    assert room.free["cpu"] == 0 and room.used_by_us["cpu"] == Fraction(6)


async def _reason_of(dispatcher: Dispatcher, name: str, reason: str) -> Any:
    row = worker_row(dispatcher, name)
    return row if row.reason == reason else None


async def test_a_missing_or_inactive_cluster_queue_says_so_on_worker_and_jobs(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    inactive = f"cq-{ns}-inactive"
    await Resource(kueue_clusters.clients["worker-b"], CLUSTER_QUEUES).apply(
        cluster_queue(inactive, flavor=f"no-such-flavor-{ns}",
                      quota={"cpu": "4", "memory": "64Gi"}),
        field_manager="tests")
    dispatcher = await dispatchers(wait_for_workers=False, workers={"static": [
        worker(kueue_clusters, "worker-a", localQueue=LOCAL_QUEUE, clusterQueue=f"gone-{ns}"),
        worker(kueue_clusters, "worker-b", localQueue=LOCAL_QUEUE, clusterQueue=inactive)]})
    missing = await eventually(
        lambda: _reason_of(dispatcher, "worker-a", c.REASON_MISSING_CLUSTER_QUEUE), timeout=20)
    assert missing.active == "False"
    assert missing.message == f"ClusterQueue 'gone-{ns}' not found on the worker"
    stopped = await eventually(
        lambda: _reason_of(dispatcher, "worker-b", c.REASON_INACTIVE_CLUSTER_QUEUE), timeout=20)
    assert stopped.message.startswith(f"ClusterQueue {inactive!r} is not active: ")
    assert f"no-such-flavor-{ns}" in stopped.message  # Kueue's own words
    await create(kueue_clusters, ns, "nowhere")

    async def held() -> dict[str, Any] | None:
        cond = await dispatched(kueue_clusters, ns, "nowhere")
        return cond if cond.get("reason") == c.REASON_NO_ACTIVE_WORKER else None
    cond = await eventually(held, timeout=20)
    assert "worker-a (MissingClusterQueue: " in cond["message"]
    assert "worker-b (InactiveClusterQueue: " in cond["message"]


async def test_a_resource_the_queue_does_not_cover_is_not_offered(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    cq = await queues(kueue_clusters, "worker-a", ns, {"cpu": "4", "memory": "64Gi"})
    # The declared quota has GPUs; the worker's ClusterQueue does not cover them.
    dispatcher = await dispatchers(workers={"static": [worker(
        kueue_clusters, "worker-a", localQueue=LOCAL_QUEUE, clusterQueue=cq,
        quota={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"})]})
    row = worker_row(dispatcher, "worker-a")
    assert row.active == "True"
    assert row.message == (f"connected; ClusterQueue {cq!r} does not cover nvidia.com/gpu of "
                           "the declared quota: jobs that need it are not placed here")
    await create(kueue_clusters, ns, "gpu", resources_per_node={
        "requests": {"cpu": "1", "nvidia.com/gpu": "1"}})

    async def unschedulable() -> dict[str, Any] | None:
        cond = await dispatched(kueue_clusters, ns, "gpu")
        return cond if cond.get("reason") == c.REASON_UNSCHEDULABLE else None
    cond = await eventually(unschedulable, timeout=20)
    assert "nvidia.com/gpu" in cond["message"]


async def test_a_priority_class_a_worker_lacks_keeps_the_job_away_from_it(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    high, unknown = f"high-{ns}", f"unknown-{ns}"
    await Resource(kueue_clusters.clients["worker-b"], WORKLOAD_PRIORITY_CLASSES).create(
        workload_priority_class(high, 1000))
    four = {"cpu": "4", "memory": "64Gi"}
    cq_a = await queues(kueue_clusters, "worker-a", ns, four)
    cq_b = await queues(kueue_clusters, "worker-b", ns, four)
    await dispatchers(workers={"static": [
        worker(kueue_clusters, "worker-a", localQueue=LOCAL_QUEUE, clusterQueue=cq_a),
        worker(kueue_clusters, "worker-b", localQueue=LOCAL_QUEUE, clusterQueue=cq_b)]})
    await create(kueue_clusters, ns, "urgent", labels={c.LABEL_PRIORITY_CLASS: high})
    await create(kueue_clusters, ns, "nameless", labels={c.LABEL_PRIORITY_CLASS: unknown})
    done = await eventually(lambda: finished(kueue_clusters, ns, "urgent"), timeout=40)
    assert done["type"] == "Complete"
    assert await placed_on(kueue_clusters, ns, "urgent") == "worker-b"

    async def unschedulable() -> dict[str, Any] | None:
        cond = await dispatched(kueue_clusters, ns, "nameless")
        return cond if cond.get("reason") == c.REASON_UNSCHEDULABLE else None
    cond = await eventually(unschedulable, timeout=20)
    assert (f"WorkloadPriorityClass {unknown!r} exists in the Kueue of no matching worker "
            "(worker-a; worker-b)") in cond["message"]
    # The worker's admin adds the class: the next probe offers the worker, the job runs.
    await Resource(kueue_clusters.clients["worker-a"], WORKLOAD_PRIORITY_CLASSES).create(
        workload_priority_class(unknown, 10))
    done = await eventually(lambda: finished(kueue_clusters, ns, "nameless"), timeout=40)
    assert done["type"] == "Complete"
    assert await placed_on(kueue_clusters, ns, "nameless") == "worker-a"
