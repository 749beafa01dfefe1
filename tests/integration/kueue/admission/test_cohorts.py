"""Two teams' ClusterQueues in a cohort, and priorities, on the manager's Kueue: the
dispatcher follows what Kueue decides, on two workers.

Team B's low-priority jobs borrow team A's idle quota; when A submits its high-priority
jobs, Kueue reclaims the borrowed quota by priority (`reclaimWithinCohort:
LowerPriority`): B's borrowing Workloads are evicted, their checks reset to Pending,
their quota held until the jobs stop, and the dispatcher withdraws those mirrors before
A's run. A's burst beyond its share cannot take B's nominal quota. Once A's jobs end,
Kueue admits B's preempted jobs again and the dispatcher places them anew. Read from
both workers all along: no job ever has two live mirrors at once, the worker never
holds more mirrors than the cohort's quota admits, and every job ends Complete. Within
one ClusterQueue a higher priority job preempts a lower one the same way.
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
from devkit.localcluster.trainer import end_pods
from dispatcher.api import constants as c
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.resource import Resource
from tests.integration.conftest import DispatcherRunner, eventually
from tests.integration.kueue.admission.conftest import (
    LiveMirrors,
    Plane,
    both,
    live_mirrors,
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
WORKER_ROOM = {"cpu": "5", "memory": "20Gi"}
"""Each worker's quota: two jobs of `JOB`, so the cohort's four running jobs fill both."""
JOB = {"requests": {"cpu": "2", "memory": "1Gi"}}
RECLAIM = {"reclaimWithinCohort": "LowerPriority", "withinClusterQueue": "LowerPriority"}
LONG = long_running(600)
"""Pods that run until the test ends them (`finish`)."""


async def ready_jobs(plane: Plane, ns: str) -> set[str]:
    """The jobs whose Workload has our check Ready (and is neither evicted nor finished)."""
    return {job for job, wl in (await workloads(plane, ns)).items()
            if our_check(wl, ns).get("state") == "Ready" and not is_true(wl, "Evicted")
            and not is_true(wl, "Finished")}


async def mirrors_by_worker(plane: Plane, ns: str) -> dict[str, set[str]]:
    """The live mirrors' names on each worker."""
    return {name: set(await live_mirrors(client, ns))
            for name, client in plane.workers.items()}


async def mirror_names(plane: Plane, ns: str) -> set[str]:
    return set().union(*(await mirrors_by_worker(plane, ns)).values())


async def dispatched(plane: Plane, ns: str, job: str) -> dict[str, Any]:
    found = await Resource(plane.manager, TRAINJOBS).get(job, namespace=ns)
    return conditions(found).get(c.CONDITION_DISPATCHED, {})


async def settled(plane: Plane, ns: str, expected: set[str]) -> None:
    """Until exactly `expected` are Ready and mirrored (and nothing else is mirrored)."""
    seen: list[Any] = []

    async def there() -> bool:
        ready, mirrored = await ready_jobs(plane, ns), await mirrors_by_worker(plane, ns)
        seen[:] = [ready, mirrored]
        return ready == expected and set().union(*mirrored.values()) == expected
    try:
        await eventually(there, timeout=90, interval=0.3)
    except AssertionError:
        states = {job: (our_check(wl, ns).get("state"),
                        [k for k in ("QuotaReserved", "Admitted", "Evicted", "Finished")
                         if is_true(wl, k)])
                  for job, wl in (await workloads(plane, ns)).items()}
        raise AssertionError(f"not settled on {expected}: ready and mirrored {seen}, "
                             f"Workloads {states}") from None


async def finish(plane: Plane, ns: str, jobs: set[str]) -> None:
    """End the pods of `jobs` on whichever worker runs them, and wait until each is
    Complete on the manager."""
    for job in sorted(jobs):
        async def ended(job: str = job) -> int:
            return sum([await end_pods(client, ns, job) for client in plane.workers.values()])
        await eventually(ended, timeout=90, interval=0.3)

    async def complete() -> bool:
        found = [await Resource(plane.manager, TRAINJOBS).get(job, namespace=ns)
                 for job in jobs]
        return all(is_true(job, "Complete") for job in found)
    await eventually(complete, timeout=60, interval=0.3)


async def priority_classes(plane: Plane, ns: str) -> tuple[str, str]:
    """Two WorkloadPriorityClasses (v1beta2) of the test: (low, high)."""
    low, high = f"{ns}-low", f"{ns}-high"
    classes = Resource(plane.manager, WORKLOAD_PRIORITY_CLASSES)
    await classes.apply(workload_priority_class(low, 10), field_manager=FIELD_MANAGER)
    await classes.apply(workload_priority_class(high, 1000), field_manager=FIELD_MANAGER)
    return low, high


def never_twice(mirrors: LiveMirrors, *, most: int) -> None:
    assert mirrors.samples > 20, f"only {mirrors.samples} reads of the workers"
    assert not mirrors.doubled, f"jobs with two live mirrors at once: {mirrors.doubled}"
    assert mirrors.most <= most, f"{mirrors.most} mirrors at once on {most} jobs' quota"


async def test_borrowed_quota_is_reclaimed_by_priority_and_the_dispatcher_follows(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    low, high = await priority_classes(admission_plane, ns)
    cohort = f"co-{ns}"
    team_a = await queues(admission_plane, ns, suffix="-a", quota=SHARE, cohort=cohort,
                          preemption=RECLAIM)
    team_b = await queues(admission_plane, ns, suffix="-b", quota=SHARE, cohort=cohort,
                          preemption=RECLAIM)
    await start(admission_plane, dispatchers, workers=both(admission_plane, WORKER_ROOM))
    await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
    plane = admission_plane
    async with watch_mirrors(plane, ns) as mirrors:
        b_jobs = {f"b-{i}" for i in range(4)}
        for name in sorted(b_jobs):
            await submit(plane, ns, name, queue=team_b, num_nodes=1, resources_per_node=JOB,
                         runtime_patches=LONG, labels={c.LABEL_PRIORITY_CLASS: low})
        await settled(plane, ns, b_jobs)  # B runs on its share and A's idle one
        assert all(len(names) == 2 for names in (await mirrors_by_worker(plane, ns)).values())

        a_jobs = {"a-0", "a-1"}
        for name in sorted(a_jobs):
            await submit(plane, ns, name, queue=team_a, num_nodes=1, resources_per_node=JOB,
                         runtime_patches=LONG, labels={c.LABEL_PRIORITY_CLASS: high})

        async def reclaimed() -> set[str] | None:
            ready = await ready_jobs(plane, ns)
            return ready if a_jobs <= ready and len(ready) == 4 else None
        ready = await eventually(reclaimed, timeout=90, interval=0.3)
        kept, preempted = ready & b_jobs, b_jobs - ready
        assert len(kept) == 2, ready
        await settled(plane, ns, a_jobs | kept)
        for name in preempted:
            wl = (await workloads(plane, ns))[name]
            assert not is_true(wl, "QuotaReserved"), wl["status"]
            shown = await dispatched(plane, ns, name)
            assert shown.get("status") == "False", shown

        # A's burst beyond its share waits: B's nominal share is not A's to take.
        await submit(plane, ns, "a-burst", queue=team_a, num_nodes=1, resources_per_node=JOB,
                     runtime_patches=LONG, labels={c.LABEL_PRIORITY_CLASS: high})

        async def looked_at() -> dict[str, Any] | None:
            wl = (await workloads(plane, ns)).get("a-burst")
            reserved = conditions(wl).get("QuotaReserved", {})
            return wl if reserved.get("status") == "False" and reserved.get("message") else None
        await eventually(looked_at, timeout=30, interval=0.3)
        assert await ready_jobs(plane, ns) == a_jobs | kept
        assert await mirror_names(plane, ns) == a_jobs | kept

        async def shown_waiting() -> bool:  # written once the job is 2 s old
            shown = await dispatched(plane, ns, "a-burst")
            return shown.get("reason") == c.REASON_WAITING_FOR_KUEUE
        await eventually(shown_waiting, timeout=10, interval=0.3)

        # A's jobs end: its burst runs on its share, and B's preempted jobs come back,
        # borrowing again, placed anew (a new mirror each).
        await finish(plane, ns, a_jobs)

        async def burst_ready() -> bool:
            return "a-burst" in await ready_jobs(plane, ns)
        await eventually(burst_ready, timeout=90, interval=0.3)
        await finish(plane, ns, {"a-burst"})
        await settled(plane, ns, b_jobs)
        for name in preempted:
            assert len(mirrors.uids[name]) >= 2, (name, mirrors.uids[name])

        # Kueue writes Admitted in its own pass after it sees every check Ready.
        async def readmitted() -> bool:
            found = await workloads(plane, ns)
            return all(is_true(found[name], "Admitted") for name in preempted)
        await eventually(readmitted, timeout=30, interval=0.3)
        await finish(plane, ns, b_jobs)
    never_twice(mirrors, most=4)
    assert set(mirrors.uids) == a_jobs | b_jobs | {"a-burst"}


async def test_a_higher_priority_job_preempts_a_lower_one_in_its_queue(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    low, high = await priority_classes(admission_plane, ns)
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
    never_twice(mirrors, most=2)
