"""Two teams' ClusterQueues in a cohort, and priorities, on the manager's Kueue: the
dispatcher follows what Kueue decides.

Team B borrows team A's idle quota; when A submits, Kueue preempts B's borrowed jobs
(their Workloads evicted, their checks reset to Pending, their quota held until the jobs
stop) and the dispatcher withdraws those mirrors before A's run: at no moment does the
worker hold more mirrors than the cohort's quota admits. A's burst beyond its share
cannot take B's nominal quota. Within one ClusterQueue a higher priority job preempts a
lower one the same way.
"""

from __future__ import annotations

from typing import Any

import pytest

from devkit.localcluster.kueue_objects import (
    ADMISSION_CHECKS,
    FIELD_MANAGER,
    WORKLOAD_PRIORITY_CLASSES,
    wait_active,
    workload_priority_class,
)
from dispatcher.api import constants as c
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.resource import Resource
from tests.integration.conftest import DispatcherRunner, eventually
from tests.integration.kueue.admission.conftest import (
    Plane,
    our_check,
    queues,
    start,
    submit,
    watch_mirrors,
    workloads,
)
from tests.integration.kueue.conftest import conditions, is_true
from tests.integration.kueue.helpers import long_running

pytestmark = pytest.mark.integration
SHARE = {"cpu": "4", "memory": "16Gi"}
"""Each team's nominal quota: two jobs of `JOB`."""
JOB = {"requests": {"cpu": "2", "memory": "1Gi"}}
RECLAIM = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
LONG = long_running(600)


async def ready_jobs(plane: Plane, ns: str) -> set[str]:
    """The jobs whose Workload has our check Ready (and is not evicted)."""
    return {job for job, wl in (await workloads(plane, ns)).items()
            if our_check(wl, ns).get("state") == "Ready" and not is_true(wl, "Evicted")}


async def mirror_names(plane: Plane, ns: str) -> set[str]:
    listed = await Resource(plane.worker, TRAINJOBS).list(namespace=ns,
                                                           label_selector=c.LABEL_ORIGIN)
    return {m["metadata"]["name"] for m in listed["items"]
            if not m["metadata"].get("deletionTimestamp")}


async def dispatched(plane: Plane, ns: str, job: str) -> dict[str, Any]:
    found = await Resource(plane.manager, TRAINJOBS).get(job, namespace=ns)
    return conditions(found).get(c.CONDITION_DISPATCHED, {})


async def settled(plane: Plane, ns: str, expected: set[str]) -> None:
    """Until exactly `expected` are Ready and mirrored (and nothing else is mirrored)."""
    async def there() -> bool:
        return (await ready_jobs(plane, ns) == expected
                and await mirror_names(plane, ns) == expected)
    await eventually(there, timeout=90, interval=0.3)


async def test_borrowed_quota_is_reclaimed_and_the_dispatcher_follows(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    cohort = f"co-{ns}"
    team_a = await queues(admission_plane, ns, suffix="-a", quota=SHARE, cohort=cohort,
                          preemption=RECLAIM)
    team_b = await queues(admission_plane, ns, suffix="-b", quota=SHARE, cohort=cohort,
                          preemption=RECLAIM)
    await start(admission_plane, dispatchers)
    await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
    async with watch_mirrors(admission_plane, ns) as mirrors:
        b_jobs = {f"b-{i}" for i in range(4)}
        for name in sorted(b_jobs):
            await submit(admission_plane, ns, name, queue=team_b, num_nodes=1,
                         resources_per_node=JOB, runtime_patches=LONG)
        await settled(admission_plane, ns, b_jobs)  # B runs on its share and A's idle one

        a_jobs = {"a-0", "a-1"}
        for name in sorted(a_jobs):
            await submit(admission_plane, ns, name, queue=team_a, num_nodes=1,
                         resources_per_node=JOB, runtime_patches=LONG)

        async def reclaimed() -> set[str] | None:
            ready = await ready_jobs(admission_plane, ns)
            return ready if a_jobs <= ready and len(ready) == 4 else None
        ready = await eventually(reclaimed, timeout=90, interval=0.3)
        kept, preempted = ready & b_jobs, b_jobs - ready
        assert len(kept) == 2, ready
        await settled(admission_plane, ns, a_jobs | kept)
        for name in preempted:
            wl = (await workloads(admission_plane, ns))[name]
            assert not is_true(wl, "QuotaReserved"), wl["status"]
            shown = await dispatched(admission_plane, ns, name)
            assert shown.get("status") == "False", shown
            job = await Resource(admission_plane.manager, TRAINJOBS).get(name, namespace=ns)
            assert job is not None
            assert not any((js.get("active") or 0) for js in
                           (job.get("status") or {}).get("jobsStatus") or []), job["status"]

        # A's burst beyond its share waits: B's nominal share is not A's to take.
        await submit(admission_plane, ns, "a-burst", queue=team_a, num_nodes=1,
                     resources_per_node=JOB, runtime_patches=LONG)

        async def looked_at() -> dict[str, Any] | None:
            wl = (await workloads(admission_plane, ns)).get("a-burst")
            reserved = conditions(wl).get("QuotaReserved", {})
            return wl if reserved.get("status") == "False" and reserved.get("message") else None
        await eventually(looked_at, timeout=30, interval=0.3)
        assert await ready_jobs(admission_plane, ns) == a_jobs | kept
        assert await mirror_names(admission_plane, ns) == a_jobs | kept
        shown = await dispatched(admission_plane, ns, "a-burst")
        assert shown.get("reason") == c.REASON_WAITING_FOR_KUEUE, shown
    assert mirrors.most <= 4, f"{mirrors.most} mirrors at once on a cohort of 4 jobs' quota"


async def test_a_higher_priority_job_preempts_a_lower_one_in_its_queue(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    low, high = f"{ns}-low", f"{ns}-high"
    classes = Resource(admission_plane.manager, WORKLOAD_PRIORITY_CLASSES)
    await classes.apply(workload_priority_class(low, 10), field_manager=FIELD_MANAGER)
    await classes.apply(workload_priority_class(high, 1000), field_manager=FIELD_MANAGER)
    team = await queues(admission_plane, ns, quota=SHARE,
                        preemption={"withinClusterQueue": "LowerPriority"})
    await start(admission_plane, dispatchers)
    await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
    async with watch_mirrors(admission_plane, ns) as mirrors:
        for name in ("low-0", "low-1"):
            await submit(admission_plane, ns, name, queue=team, num_nodes=1,
                         resources_per_node=JOB, runtime_patches=LONG,
                         labels={c.LABEL_PRIORITY_CLASS: low})
        await settled(admission_plane, ns, {"low-0", "low-1"})
        await submit(admission_plane, ns, "urgent", queue=team, num_nodes=1,
                     resources_per_node=JOB, runtime_patches=LONG,
                     labels={c.LABEL_PRIORITY_CLASS: high})

        async def preempted() -> set[str] | None:
            ready = await ready_jobs(admission_plane, ns)
            return ready if "urgent" in ready and len(ready) == 2 else None
        ready = await eventually(preempted, timeout=90, interval=0.3)
        await settled(admission_plane, ns, ready)
        (loser,) = {"low-0", "low-1"} - ready
        wl = (await workloads(admission_plane, ns))[loser]
        assert conditions(wl).get("Preempted", {}).get("status") == "True" or not is_true(
            wl, "QuotaReserved"), wl["status"]
        assert (await dispatched(admission_plane, ns, loser)).get("status") == "False"
    assert mirrors.most <= 2, f"{mirrors.most} mirrors at once on a queue of 2 jobs' quota"
