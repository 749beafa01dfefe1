"""When a dispatched job loses its mirror, our check goes `Retry`: Kueue evicts the
Workload, releases and requeues it, and the dispatcher places it again once Kueue
reserves quota anew (a mirror as free of the manager's flavor as the first); the job
then completes. A worker lost past its timeout sends the check to `Retry` too. A user
deactivating a running job's Workload has its mirror withdrawn. A dispatcher restarted
or replaced by another leader while checks wait takes each up once, and so does one
stopped between writing a job's record and creating its mirror."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from devkit.localcluster.kueue_objects import ADMISSION_CHECKS, WORKLOADS, wait_active
from devkit.localcluster.trainer import end_pods
from dispatcher.admin import ensure_namespace
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.resource import EVENTS, Resource
from tests.integration.conftest import (
    FAST_LEADER_ELECTION,
    DispatcherRunner,
    eventually,
    trainjobs_refused,
)
from tests.integration.kueue.admission.conftest import (
    PROBE,
    WORKER,
    WORKER_B,
    Cable,
    Plane,
    free_of_the_flavor,
    our_check,
    queues,
    records_frozen,
    start,
    static_worker,
    submit,
    watch_mirrors,
    workload_of,
)
from tests.integration.kueue.conftest import conditions, is_true
from tests.integration.kueue.helpers import long_running

pytestmark = pytest.mark.integration
LONG = long_running(600)
"""Pods that run until the test ends: a job the test counts cannot finish first (its
record gone, its check never Ready)."""


@pytest_asyncio.fixture(autouse=True)
async def team(admission_plane: Plane, ns: str) -> None:
    await queues(admission_plane, ns)


async def check_state(plane: Plane, ns: str, job: str) -> str:
    return str(our_check(await workload_of(plane, ns, job), ns).get("state", ""))


async def wait_all_ready(plane: Plane, ns: str, names: list[str]) -> None:
    """Waits until our check is Ready on every job's Workload; on timeout, says
    which state each one was left in."""
    states: dict[str, str] = {}

    async def all_ready() -> bool:
        states.update({name: await check_state(plane, ns, name) for name in names})
        return all(state == "Ready" for state in states.values())
    try:
        await eventually(all_ready, timeout=90, interval=0.3)
    except AssertionError as error:
        raise AssertionError(f"checks not all Ready: {states}") from error


async def test_a_deleted_mirror_sends_the_check_to_retry_and_the_job_runs_again(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    await start(admission_plane, dispatchers)
    await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
    await submit(admission_plane, ns, "again", runtime_patches=LONG)
    mirrors = Resource(admission_plane.worker, TRAINJOBS)

    async def running() -> dict[str, Any] | None:
        mirror = await mirrors.get("again", namespace=ns)
        return mirror if mirror and await check_state(admission_plane, ns, "again") == "Ready" \
            else None
    first = await eventually(running, timeout=60, interval=0.2)
    await mirrors.delete("again", namespace=ns)

    async def retried() -> bool:
        """Kueue's event on the Workload: evicted for our Retry."""
        listed = await Resource(admission_plane.manager, EVENTS).list(namespace=ns)
        return any(e.get("reason") == "EvictedDueToAdmissionCheck" for e in listed["items"])
    await eventually(retried, timeout=60, interval=0.2)

    async def placed_again() -> dict[str, Any] | None:
        mirror = await mirrors.get("again", namespace=ns)
        fresh = mirror and mirror["metadata"]["uid"] != first["metadata"]["uid"]
        return mirror if fresh and await check_state(
            admission_plane, ns, "again") == "Ready" else None
    second = await eventually(placed_again, timeout=90, interval=0.2)
    assert free_of_the_flavor(first) and free_of_the_flavor(second), second["spec"]

    async def admitted() -> dict[str, Any] | None:
        workload = await workload_of(admission_plane, ns, "again")
        return workload if is_true(workload, "Admitted") else None
    workload = await eventually(admitted, timeout=30, interval=0.2)
    assert int(our_check(workload, ns).get("retryCount") or 0) == 1, workload["status"]
    records = await Resource(admission_plane.manager, PLACEMENTS).list(namespace=f"{ns}-system")
    assert len(records["items"]) == 1, records["items"]

    async def ended() -> int:
        return await end_pods(admission_plane.worker, ns, "again")
    await eventually(ended, timeout=60, interval=0.3)

    async def complete() -> dict[str, Any] | None:
        job = await Resource(admission_plane.manager, TRAINJOBS).get("again", namespace=ns)
        return job if is_true(job, "Complete") else None
    job = await eventually(complete, timeout=60, interval=0.3)
    assert conditions(job)[c.CONDITION_DISPATCHED]["status"] == "True"


async def test_a_new_leader_takes_up_pending_checks_without_duplicating(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    """Two replicas; the leader stops while Kueue hands it jobs. The standby takes over:
    every check ends Ready, with one record and one mirror per job, each mirror created
    once (a mirror deleted and made again would show a second UID)."""
    await ensure_namespace(admission_plane.manager, f"{ns}-system")
    election = {"leaderElection": FAST_LEADER_ELECTION}
    first = await start(admission_plane, dispatchers, **election)
    await start(admission_plane, dispatchers, wait_for_workers=False, **election)
    await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
    names = [f"ha-{i}" for i in range(8)]
    async with watch_mirrors(admission_plane, ns) as mirrors:
        for name in names[:4]:
            await submit(admission_plane, ns, name, runtime_patches=LONG)
        await dispatchers.stop(first)
        for name in names[4:]:
            await submit(admission_plane, ns, name, runtime_patches=LONG)

        await wait_all_ready(admission_plane, ns, names)
    records = await Resource(admission_plane.manager, PLACEMENTS).list(namespace=f"{ns}-system")
    assert sorted(r["spec"]["job"]["name"] for r in records["items"]) == names
    assert {name: len(uids) for name, uids in mirrors.uids.items()} == dict.fromkeys(names, 1)


async def test_a_user_deactivating_a_running_jobs_workload_withdraws_its_mirror(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    """`spec.active: false` on a Ready, running Workload: Kueue evicts it and the
    dispatcher takes the mirror off at once (not an eviction); active again, Kueue
    admits it anew and the dispatcher places a new mirror."""
    await start(admission_plane, dispatchers)
    await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
    await submit(admission_plane, ns, "paused", runtime_patches=LONG)
    mirrors = Resource(admission_plane.worker, TRAINJOBS)

    async def running() -> dict[str, Any] | None:
        mirror = await mirrors.get("paused", namespace=ns)
        runs = mirror and any(js.get("ready") for js in
                              (mirror.get("status") or {}).get("jobsStatus") or [])
        return mirror if runs and await check_state(
            admission_plane, ns, "paused") == "Ready" else None
    first = await eventually(running, timeout=60, interval=0.2)
    workload = await workload_of(admission_plane, ns, "paused")
    assert workload is not None
    workloads = Resource(admission_plane.manager, WORKLOADS)
    await workloads.merge_patch(workload["metadata"]["name"], {"spec": {"active": False}},
                                namespace=ns)

    async def withdrawn() -> dict[str, Any] | None:
        if await mirrors.get("paused", namespace=ns) is not None:
            return None
        job = await Resource(admission_plane.manager, TRAINJOBS).get("paused", namespace=ns)
        shown = conditions(job).get(c.CONDITION_DISPATCHED, {})
        return shown if shown.get("reason") == c.REASON_WITHDRAWN_BY_KUEUE else None
    shown = await eventually(withdrawn, timeout=60, interval=0.2)
    assert "deactivated" in shown["message"], shown

    async def released() -> bool:
        return not is_true(await workload_of(admission_plane, ns, "paused"), "QuotaReserved")
    await eventually(released, timeout=30, interval=0.2)
    await workloads.merge_patch(workload["metadata"]["name"], {"spec": {"active": True}},
                                namespace=ns)

    async def placed_again() -> dict[str, Any] | None:
        mirror = await mirrors.get("paused", namespace=ns)
        fresh = mirror and mirror["metadata"]["uid"] != first["metadata"]["uid"]
        return mirror if fresh and await check_state(
            admission_plane, ns, "paused") == "Ready" else None
    await eventually(placed_again, timeout=90, interval=0.2)
    job = await Resource(admission_plane.manager, TRAINJOBS).get("paused", namespace=ns)
    assert job is not None
    assert int((job["metadata"].get("annotations") or {}).get(c.ANNOTATION_EVICTIONS) or 0) \
        == 0, "a withdrawal is not an eviction"


async def test_a_dispatcher_stopped_between_record_and_mirror_is_taken_over_once(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    """The crash window: the record of each job written, its mirror not yet created.
    The worker refuses the mirrors (a real admission policy) and the manager keeps the
    records as first written, so the dispatcher is stopped with every job recorded on
    the worker and no mirror anywhere; with both lifted, the next dispatcher creates each
    mirror once, on the recorded worker: one record, one mirror UID and one Ready (no
    Retry) per job."""
    system = f"{ns}-system"
    await ensure_namespace(admission_plane.manager, system)
    names = [f"crash-{i}" for i in range(3)]
    records = Resource(admission_plane.manager, PLACEMENTS)

    async def recorded() -> dict[str, str]:
        listed = await records.list(namespace=system)
        return {r["spec"]["job"]["name"]: r["spec"]["worker"] for r in listed["items"]
                if r["metadata"]["name"] != PROBE}
    async with records_frozen(admission_plane.manager, system), trainjobs_refused(
            admission_plane.worker, ns, "CREATE", "not now: the test refuses mirrors"):
        first = await start(admission_plane, dispatchers)
        await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
        for name in names:
            await submit(admission_plane, ns, name, runtime_patches=LONG)

        async def all_recorded() -> bool:
            return await recorded() == dict.fromkeys(names, WORKER)
        await eventually(all_recorded, timeout=60, interval=0.2)
        await dispatchers.stop(first)
    assert await recorded() == dict.fromkeys(names, WORKER)
    mirrors_now = await Resource(admission_plane.worker, TRAINJOBS).list(namespace=ns)
    assert not mirrors_now["items"], "the window is between record and mirror"
    assert all([await check_state(admission_plane, ns, name) == "Pending" for name in names])

    async with watch_mirrors(admission_plane, ns) as mirrors:
        await start(admission_plane, dispatchers)

        await wait_all_ready(admission_plane, ns, names)
    assert await recorded() == dict.fromkeys(names, WORKER)
    assert {name: len(uids) for name, uids in mirrors.uids.items()} == dict.fromkeys(names, 1)
    assert not mirrors.doubled
    for name in names:
        check = our_check(await workload_of(admission_plane, ns, name), ns)
        assert not check.get("retryCount"), check
    listed = await Resource(admission_plane.manager, EVENTS).list(namespace=ns)
    assert not [e for e in listed["items"] if e.get("reason") == "EvictedDueToAdmissionCheck"]


async def test_a_lost_worker_sends_the_check_to_retry(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner,
        tmp_path: Path) -> None:
    """The worker the job runs on stops answering (the dispatcher reaches it through a
    relay the test cuts): past `workers.lostTimeoutSeconds`, with `whenLost: Requeue`,
    the job is taken off it (WorkerLost) and our check goes Retry, so Kueue evicts the
    Workload and requeues it; back on the line, the job is placed again."""
    cable = Cable(admission_plane.plane.clusters[WORKER_B].kubeconfig()["clusters"][0]
                  ["cluster"]["server"])
    await cable.join()
    relayed = tmp_path / "relayed.kubeconfig"
    relayed.write_text(yaml.safe_dump(cable.kubeconfig(
        admission_plane.plane.clusters[WORKER_B].kubeconfig())))
    try:
        await start(admission_plane, dispatchers, workers={
            "static": [{**static_worker(admission_plane, WORKER_B), "kubeconfig": str(relayed)}],
            "lostTimeoutSeconds": 3, "whenLost": "Requeue"})
        await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
        await submit(admission_plane, ns, "stranded", runtime_patches=LONG)

        async def ready() -> bool:
            return await check_state(admission_plane, ns, "stranded") == "Ready"
        await eventually(ready, timeout=60, interval=0.2)
        await cable.cut()

        async def retried() -> list[dict[str, Any]]:
            listed = await Resource(admission_plane.manager, EVENTS).list(namespace=ns)
            return [e for e in listed["items"]
                    if e.get("reason") == "EvictedDueToAdmissionCheck"]
        await eventually(retried, timeout=60, interval=0.3)
        listed = await Resource(admission_plane.manager, EVENTS).list(namespace=ns)
        told = [e for e in listed["items"]
                if (e.get("regarding") or {}).get("name") == "stranded"
                and "worker-b lost" in str(e.get("note"))]
        assert told, [(e.get("reason"), e.get("note")) for e in listed["items"]]
        await cable.join()

        async def placed_again() -> bool:
            workload = await workload_of(admission_plane, ns, "stranded")
            check = our_check(workload, ns)
            return check.get("state") == "Ready" and int(check.get("retryCount") or 0) >= 1
        await eventually(placed_again, timeout=90, interval=0.3)
    finally:
        await cable.cut()
