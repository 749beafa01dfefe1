"""Workers shared with their own users: placement by what the worker's Kueue can admit
now, the admission timeout, preemption by the worker's Kueue, a restart while mirrors
wait, cohort borrowing, and a ClusterQueue that cannot be used.

Real Kueue on both workers (see conftest); local jobs are TrainJobs submitted straight
to a worker's LocalQueue, as that worker's users would.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from devkit.localcluster.kueue_objects import (
    CLUSTER_QUEUES,
    WORKLOAD_PRIORITY_CLASSES,
    workload_priority_class,
)
from dispatcher.api import constants as c
from dispatcher.app import Dispatcher
from dispatcher.kube.resource import EVENTS, Resource
from tests.integration.conftest import eventually, looked_at
from tests.integration.kueue.conftest import DISPATCHER_MANAGER, KueueClusters
from tests.integration.kueue.helpers import (
    LOCAL_QUEUE,
    PREEMPT_LOWER_PRIORITY,
    StartOnHub,
    create,
    create_local,
    dispatched,
    finished,
    long_running,
    manager_job,
    mirrors,
    placed_on,
    queues,
    watch_running,
    worker,
)

pytestmark = pytest.mark.integration
FOUR_CPUS = {"cpu": "4", "memory": "64Gi"}


def room(dispatcher: Dispatcher, name: str) -> Any:
    assert dispatcher.registry is not None
    return dispatcher.capacities.of(dispatcher.registry.workers[name])


async def _is(value: bool) -> bool:
    return value


async def test_local_jobs_fill_a_worker_so_jobs_go_to_the_other_and_back(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    cq_a = await queues(kueue_clusters, "worker-a", ns, FOUR_CPUS)
    cq_b = await queues(kueue_clusters, "worker-b", ns, FOUR_CPUS)
    # The worker's own users take all 4 CPUs of A for a few seconds.
    for name in ("local-0", "local-1"):
        await create_local(kueue_clusters, "worker-a", ns, name, num_nodes=2,
                           runtime_patches=long_running(8))
    dispatcher = await dispatchers(workers={"static": [
        worker(kueue_clusters, "worker-a", localQueue=LOCAL_QUEUE, clusterQueue=cq_a),
        worker(kueue_clusters, "worker-b", localQueue=LOCAL_QUEUE, clusterQueue=cq_b)]})
    await eventually(lambda: _is(room(dispatcher, "worker-a").used_by_others.get("cpu")
                                 == Fraction(4)), timeout=30)
    assert room(dispatcher, "worker-a").free["cpu"] == 0
    for name in ("first-0", "first-1"):
        await create(kueue_clusters, ns, name, runtime_patches=long_running(30))

    async def both_on_b() -> bool:
        return [await placed_on(kueue_clusters, ns, n) for n in ("first-0", "first-1")] == [
            "worker-b", "worker-b"]
    await eventually(both_on_b, timeout=30)
    # The local jobs finish: A is free again, and with more room than B it gets the next.
    await eventually(lambda: _is(not room(dispatcher, "worker-a").used_by_others), timeout=40)
    await create(kueue_clusters, ns, "later")
    await eventually(lambda: _placed_on_is(kueue_clusters, ns, "later", "worker-a"), timeout=30)
    assert (await finished_eventually(kueue_clusters, ns, "later"))["type"] == "Complete"


async def _placed_on_is(clusters: KueueClusters, ns: str, name: str, worker_name: str) -> bool:
    return await placed_on(clusters, ns, name) == worker_name


async def finished_eventually(clusters: KueueClusters, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = await eventually(lambda: finished(clusters, ns, name), timeout=40)
    return found


async def _events(clusters: KueueClusters, ns: str, name: str) -> list[dict[str, Any]]:
    listed = await Resource(clusters.clients[DISPATCHER_MANAGER], EVENTS).list(namespace=ns)
    return [e for e in listed["items"] if (e.get("regarding") or {}).get("name") == name]


async def test_a_mirror_not_admitted_in_time_is_moved_and_the_old_one_is_gone(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    await queues(kueue_clusters, "worker-a", ns, {"cpu": "1", "memory": "64Gi"})
    await queues(kueue_clusters, "worker-b", ns, FOUR_CPUS)
    # The dispatcher knows A only by its LocalQueue and a large declared quota, so A looks
    # best; A's Kueue cannot admit a 2-CPU job.
    big = {"cpu": "64", "memory": "256Gi"}
    await dispatchers(placement={"admissionTimeoutSeconds": 4}, workers={"static": [
        worker(kueue_clusters, "worker-a", localQueue=LOCAL_QUEUE, quota=big),
        worker(kueue_clusters, "worker-b", localQueue=LOCAL_QUEUE,
               quota={"cpu": "8", "memory": "64Gi"})]})
    await create(kueue_clusters, ns, "moved", num_nodes=2)

    async def waiting_on_a() -> dict[str, Any] | None:
        cond = await dispatched(kueue_clusters, ns, "moved")
        return cond if cond.get("reason") == c.REASON_WAITING_FOR_ADMISSION else None
    cond = await eventually(waiting_on_a, timeout=30)
    assert cond["message"].startswith("placed on worker worker-a, waiting for admission")
    await eventually(lambda: _placed_on_is(kueue_clusters, ns, "moved", "worker-b"), timeout=30)
    assert (await finished_eventually(kueue_clusters, ns, "moved"))["type"] == "Complete"
    assert await mirrors(kueue_clusters, "worker-a", ns) == []
    job = await manager_job(kueue_clusters, ns, "moved")
    assert job is not None
    assert c.ANNOTATION_EVICTIONS not in (job["metadata"].get("annotations") or {})
    [event] = [e for e in await _events(kueue_clusters, ns, "moved")
               if e["reason"] == c.REASON_ADMISSION_TIMEOUT]
    assert event["type"] == "Warning"
    assert event["note"].startswith("not admitted by the Kueue of worker worker-a in ")
    assert "insufficient quota for cpu" in event["note"]


async def test_a_local_job_of_higher_priority_preempts_a_mirror_which_runs_elsewhere(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    low, high = f"low-{ns}", f"high-{ns}"
    for name in ("worker-a", "worker-b"):
        classes = Resource(kueue_clusters.clients[name], WORKLOAD_PRIORITY_CLASSES)
        await classes.create(workload_priority_class(low, 10))
        await classes.create(workload_priority_class(high, 1000))
    cq_a = await queues(kueue_clusters, "worker-a", ns, FOUR_CPUS,
                        preemption=PREEMPT_LOWER_PRIORITY)
    cq_b = await queues(kueue_clusters, "worker-b", ns, {"cpu": "2", "memory": "64Gi"})
    await dispatchers(workers={"static": [
        worker(kueue_clusters, "worker-a", localQueue=LOCAL_QUEUE, clusterQueue=cq_a),
        worker(kueue_clusters, "worker-b", localQueue=LOCAL_QUEUE, clusterQueue=cq_b)]})
    async with watch_running(kueue_clusters, ("worker-a", "worker-b"), ns) as copies:
        await create(kueue_clusters, ns, "victim", num_nodes=2, runtime_patches=long_running(10),
                     labels={c.LABEL_PRIORITY_CLASS: low})
        await eventually(lambda: _is(copies.running.get("victim") == {"worker-a"}), timeout=30)
        [mirror] = await mirrors(kueue_clusters, "worker-a", ns)
        assert mirror["metadata"]["labels"][c.LABEL_PRIORITY_CLASS] == low
        # The worker's own user needs the whole queue, at a higher priority.
        await create_local(kueue_clusters, "worker-a", ns, "urgent", num_nodes=4,
                           runtime_patches=long_running(30), labels={c.LABEL_PRIORITY_CLASS: high})
        await eventually(lambda: _placed_on_is(kueue_clusters, ns, "victim", "worker-b"),
                         timeout=30)
        assert (await finished_eventually(kueue_clusters, ns, "victim"))["type"] == "Complete"
    assert copies.most["victim"] == 1, copies.most
    job = await manager_job(kueue_clusters, ns, "victim")
    assert job is not None
    # Preempted by the worker: requeued with the worker's reason, not counted.
    assert c.ANNOTATION_EVICTIONS not in (job["metadata"].get("annotations") or {})
    [evicted] = [e for e in await _events(kueue_clusters, ns, "victim")
                 if e["reason"] == c.REASON_EVICTED]
    assert evicted["note"].startswith("evicted on worker worker-a by its Kueue (Preempted): ")
    assert "prioritization" in evicted["note"]


async def test_a_restart_while_a_mirror_waits_for_admission_duplicates_nothing(
    kueue_clusters: KueueClusters, kueue_namespace: str, dispatchers: StartOnHub,
) -> None:
    ns = kueue_namespace
    cq_a = await queues(kueue_clusters, "worker-a", ns, {"cpu": "1", "memory": "64Gi"})
    await queues(kueue_clusters, "worker-b", ns, FOUR_CPUS)
    big = {"cpu": "64", "memory": "256Gi"}
    settings: dict[str, Any] = dict(placement={"admissionTimeoutSeconds": 0}, workers={
        "static": [worker(kueue_clusters, "worker-a", localQueue=LOCAL_QUEUE, quota=big),
                   worker(kueue_clusters, "worker-b", localQueue=LOCAL_QUEUE,
                          quota={"cpu": "8", "memory": "64Gi"})]})
    first = await dispatchers(**settings)
    await create(kueue_clusters, ns, "patient", num_nodes=2)

    async def waiting() -> bool:
        return (await dispatched(kueue_clusters, ns, "patient")).get(
            "reason") == c.REASON_WAITING_FOR_ADMISSION
    await eventually(waiting, timeout=30)
    [before] = await mirrors(kueue_clusters, "worker-a", ns)
    job = await manager_job(kueue_clusters, ns, "patient")
    assert job is not None
    await dispatchers.stop(first)
    second = await dispatchers(**settings)
    await looked_at(second, [job["metadata"]["uid"]])  # looked at the job since it started
    [after] = await mirrors(kueue_clusters, "worker-a", ns)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert await mirrors(kueue_clusters, "worker-b", ns) == []
    assert await waiting()
    # The worker's admin grows the queue: the same mirror is admitted and completes.
    queue = Resource(kueue_clusters.clients["worker-a"], CLUSTER_QUEUES)
    current = await queue.get(cq_a)
    assert current is not None
    current["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "4"
    resources = current["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    await queue.merge_patch(cq_a, {"spec": {"resourceGroups": [{
        "coveredResources": current["spec"]["resourceGroups"][0]["coveredResources"],
        "flavors": [{"name": "default", "resources": resources}]}]}})
    assert (await finished_eventually(kueue_clusters, ns, "patient"))["type"] == "Complete"
    assert await placed_on(kueue_clusters, ns, "patient") == "worker-a"
