"""A namespace user who may edit TrainJobs cannot forge a placement, on real API servers.

The user is a real identity (a client certificate) bound by RBAC to edit TrainJobs in
one namespace, and nothing else: not their status, not the dispatcher's namespace. Every
edit they can make to a job is tried while the workers are full; what is asserted is read
from the workers' own objects: never two live mirrors of one job, never more live mirror
demand on a worker than its quota, no mirror left behind. Then the same after a restart.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.invariants import check_invariants, live_mirror_demand
from devkit.localcluster import LocalControlPlane
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS, placement_body, record_of
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.app import Dispatcher
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource, ResourceKind
from dispatcher.placement import resources
from tests.integration.conftest import StartDispatcher, eventually
from tests.integration.rbac import namespace_editor

pytestmark = pytest.mark.integration
WORKERS = ("worker-a", "worker-b")
QUOTA = {"cpu": "4", "memory": "64Gi"}
FULL = {"cpu": "4"}
"""Each job's nodes ask for the whole of a worker's CPU quota."""
_EVENTS = ResourceKind("events.k8s.io", "v1", "events", namespaced=True)
KIND = TrainJobKind()


def full_job(name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
    return trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                    resources_per_node={"requests": FULL}, **kwargs)


def forged(name: str, namespace: str, worker: str) -> dict[str, Any]:
    """A new job that claims to be placed already, as a user can write it."""
    job = full_job(name, namespace, annotations={
        c.ANNOTATION_CLUSTER: worker, c.ANNOTATION_DEMAND: "cpu=1,pods=1"})
    job["metadata"]["finalizers"] = [c.FINALIZER]
    return job


def dispatched(job: dict[str, Any] | None) -> dict[str, Any]:
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == c.CONDITION_DISPATCHED:
            return dict(cond)
    return {}


class Fleet:
    """What the workers really run, read from their own objects."""

    def __init__(self, clients: dict[str, ClusterClient], namespace: str) -> None:
        self.clients = clients
        self.namespace = namespace

    async def mirrors_of(self, name: str) -> list[str]:
        return [w for w in WORKERS if await Resource(self.clients[w], TRAINJOBS).get(
            name, namespace=self.namespace) is not None]

    async def within_quota(self) -> list[str]:
        """Workers whose live mirrors need more than the quota (empty when none)."""
        over = []
        for worker in WORKERS:
            running = await live_mirror_demand(self.clients[worker], self.namespace,
                                               origin=self.namespace)
            if not resources.fits(running, resources.parse_vector(QUOTA)):
                over.append(f"{worker}: {running}")
        return over

    async def invariants(self) -> list[str]:
        return await check_invariants(self.clients, self.namespace, origin=self.namespace,
                                      workers={w: QUOTA for w in WORKERS})


async def events_of(admin: ClusterClient, namespace: str, name: str, reason: str
                    ) -> list[dict[str, Any]]:
    listed = await Resource(admin, _EVENTS).list(namespace=namespace)
    return [e for e in listed["items"]
            if e["regarding"]["name"] == name and e["reason"] == reason]


async def start(start_dispatcher: StartDispatcher, plane: LocalControlPlane) -> Dispatcher:
    return await start_dispatcher(workers={"static": [
        {"name": w, "kubeconfig": str(plane.clusters[w].kubeconfig_path), "quota": QUOTA}
        for w in WORKERS]})


async def test_a_namespace_editor_cannot_move_skip_the_queue_or_hide_a_mirror(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    admin = admin_clients["manager"]
    fleet = Fleet(admin_clients, namespace)
    dispatcher = await start(start_dispatcher, control_plane)
    async with namespace_editor(control_plane, admin, namespace) as user:
        jobs = Resource(user, TRAINJOBS)
        # What RBAC refuses the user outright: the record and the status.
        with pytest.raises(ApiException) as refused:
            await Resource(user, PLACEMENTS).create(
                placement_body(record_of({"spec": {"job": {"namespace": namespace,
                                                            "name": "x", "uid": "u"},
                                                    "worker": "worker-a"}}),
                               namespace=f"{namespace}-system"),
                namespace=f"{namespace}-system")
        assert refused.value.status == 403

        for name in ("first", "second"):
            await jobs.create(full_job(name, namespace), namespace=namespace)
        where: dict[str, str] = {}
        for name in ("first", "second"):
            mirrors = await eventually(lambda n=name: fleet.mirrors_of(n), timeout=20)
            assert len(mirrors) == 1
            where[name] = mirrors[0]
        assert set(where.values()) == set(WORKERS)
        with pytest.raises(ApiException) as refused:
            await jobs.merge_patch("first", {"status": {"conditions": []}},
                                   namespace=namespace, subresource="status")
        assert refused.value.status == 403

        # 1. Moving a placed job by its annotation: undone, and no second copy.
        other = where["second"]
        await jobs.merge_patch("first", {"metadata": {"annotations": {
            c.ANNOTATION_CLUSTER: other, c.ANNOTATION_DEMAND: "cpu=1"}}}, namespace=namespace)
        await eventually(lambda: events_of(admin, namespace, "first", c.REASON_EDIT_UNDONE),
                         timeout=15)

        async def restored() -> bool:
            job = await jobs.get("first", namespace=namespace) or {}
            return (job["metadata"].get("annotations") or {}).get(
                c.ANNOTATION_CLUSTER) == where["first"]
        await eventually(restored, timeout=10)
        assert await fleet.mirrors_of("first") == [where["first"]]
        assert not await fleet.within_quota()

        # 2. Skipping the queue: a new job with a forged placement and our finalizer,
        #    while both workers are full, waits its turn like any other.
        await jobs.create(forged("forged", namespace, where["first"]), namespace=namespace)

        async def queued() -> dict[str, Any] | None:
            job = await jobs.get("forged", namespace=namespace)
            return job if dispatched(job).get("reason") == c.REASON_WAITING_FOR_QUOTA else None
        job = await eventually(queued, timeout=15)
        assert c.ANNOTATION_CLUSTER not in (job["metadata"].get("annotations") or {})
        assert c.FINALIZER not in (job["metadata"].get("finalizers") or [])
        await eventually(lambda: events_of(admin, namespace, "forged", c.REASON_EDIT_UNDONE),
                         timeout=10)
        assert await fleet.mirrors_of("forged") == []

        # 3. Stripping the finalizer of a placed job, then deleting it: its mirror goes
        #    at once, and its quota is given to the next job only once it has gone.
        await jobs.merge_patch("first", {"metadata": {"finalizers": None}},
                               namespace=namespace)
        await jobs.delete("first", namespace=namespace)

        async def moved_in() -> bool:
            assert not await fleet.within_quota(), "live mirrors over a worker's quota"
            return (await fleet.mirrors_of("first") == []
                    and await fleet.mirrors_of("forged") == [where["first"]])
        await eventually(moved_in, timeout=30, interval=0.02)
        assert dispatcher.ledger.used(where["first"]).get("cpu") == 4
        assert not await fleet.invariants()

        # 4. After a restart the ledger comes from the records and the live mirrors:
        #    another forged job still waits, and nothing runs twice.
        await start_dispatcher.stop(dispatcher)
        await jobs.create(forged("after-restart", namespace, where["second"]),
                          namespace=namespace)
        dispatcher = await start(start_dispatcher, control_plane)
        assert {w: dispatcher.ledger.used(w).get("cpu") for w in WORKERS} == {
            w: 4 for w in WORKERS}

        async def queued_again() -> bool:
            job = await jobs.get("after-restart", namespace=namespace)
            return dispatched(job).get("reason") == c.REASON_WAITING_FOR_QUOTA
        await eventually(queued_again, timeout=15)
        assert await fleet.mirrors_of("after-restart") == []
        assert not await fleet.within_quota()
        assert not await fleet.invariants()

        # Every job deleted by the user: no mirror left behind.
        for name in ("second", "forged", "after-restart"):
            await jobs.delete(name, namespace=namespace)

        async def all_gone() -> bool:
            left = [n for n in ("second", "forged", "after-restart")
                    if await fleet.mirrors_of(n)]
            return not left and not (await jobs.list(namespace=namespace))["items"]
        await eventually(all_gone, timeout=30)
        assert not (await Resource(admin, PLACEMENTS).list(
            namespace=f"{namespace}-system"))["items"]


async def placement_of(admin: ClusterClient, namespace: str, uid: str) -> Any:
    found = await Resource(admin, PLACEMENTS).get(uid, namespace=f"{namespace}-system")
    return record_of(found) if found is not None else None


async def test_a_mirror_an_earlier_version_placed_by_annotation_is_adopted_not_doubled(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    """Before the records, the placement lived in the job's annotations: a running job
    of that time keeps its one mirror, and is recorded where it runs."""
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    job = await jobs.create(full_job("legacy", namespace), namespace=namespace)
    mirror = KIND.build_mirror(job, origin=namespace, local_queue="")
    created = await Resource(admin_clients["worker-b"], TRAINJOBS).create(
        mirror, namespace=namespace)
    await jobs.merge_patch("legacy", {"metadata": {
        "finalizers": [c.FINALIZER],
        "annotations": {c.ANNOTATION_CLUSTER: "worker-b", c.ANNOTATION_DEMAND: "cpu=4"}}},
        namespace=namespace)
    # Its worker answers late: worker-a, with room, is offered jobs first.
    worker_b = control_plane.clusters["worker-b"]
    worker_b.pause()
    try:
        dispatcher = await start_dispatcher(wait_for_workers=False, workers={"static": [
            {"name": w, "kubeconfig": str(control_plane.clusters[w].kubeconfig_path),
             "quota": QUOTA} for w in WORKERS]})

        def requeues() -> float:
            return dispatcher.metrics.registry.get_sample_value(
                "dispatcher_reconciles_total", {"result": "requeue"}) or 0.0

        async def worker_a_open() -> bool:
            assert dispatcher.registry is not None
            a = dispatcher.registry.get("worker-a")
            return a is not None and a.usable() and a.collected
        await eventually(worker_a_open, timeout=20)
        seen = requeues()
        # The job was looked at again, and again, while worker-b could not be read...
        await eventually(lambda: _more_than(requeues, seen + 2), timeout=10)
        # ...and not placed on worker-a meanwhile.
        assert await Resource(admin_clients["worker-a"], TRAINJOBS).get(
            "legacy", namespace=namespace) is None
    finally:
        worker_b.resume()
    uid = job["metadata"]["uid"]
    record = await eventually(lambda: placement_of(admin_clients["manager"], namespace, uid),
                              timeout=30)
    assert record.worker == "worker-b"
    # Events are written by the recorder's own task, a moment after the record.
    await eventually(lambda: events_of(admin_clients["manager"], namespace, "legacy",
                                       c.REASON_ADOPTED), timeout=10)
    fleet = Fleet(admin_clients, namespace)
    assert await fleet.mirrors_of("legacy") == ["worker-b"]
    still = await Resource(admin_clients["worker-b"], TRAINJOBS).get("legacy",
                                                                      namespace=namespace)
    assert still is not None and still["metadata"]["uid"] == created["metadata"]["uid"]
    assert dispatcher.ledger.used("worker-b").get("cpu") == 4
    assert not await fleet.invariants()


async def test_a_placed_job_that_stops_being_claimed_is_withdrawn_and_can_be_deleted(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    """The namespace editor takes the claim label off a running job: it leaves the
    dispatcher's hands whole (mirror, finalizer, record), and deleting it does not hang."""
    await start_dispatcher(claim={"namespaces": [namespace], "labelSelector": "team=a"})
    async with namespace_editor(control_plane, admin_clients["manager"], namespace) as user:
        jobs = Resource(user, TRAINJOBS)
        job = await jobs.create(full_job("labelled", namespace, labels={"team": "a"}),
                                namespace=namespace)
        fleet = Fleet(admin_clients, namespace)
        await eventually(lambda: fleet.mirrors_of("labelled"), timeout=15)
        await jobs.merge_patch("labelled", {"metadata": {"labels": {"team": None}}},
                               namespace=namespace)

        async def withdrawn() -> bool:
            current = await jobs.get("labelled", namespace=namespace) or {}
            return (not await fleet.mirrors_of("labelled")
                    and c.FINALIZER not in (current["metadata"].get("finalizers") or [])
                    and await placement_of(admin_clients["manager"], namespace,
                                           job["metadata"]["uid"]) is None)
        await eventually(withdrawn, timeout=15)
        await eventually(lambda: events_of(admin_clients["manager"], namespace, "labelled",
                                           c.REASON_NOT_CLAIMED), timeout=10)
        await jobs.delete("labelled", namespace=namespace)
        await eventually(lambda: _gone(jobs, "labelled", namespace), timeout=10)


async def test_a_placed_job_unlabelled_and_deleted_at_once_leaves_nothing_behind(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    """The claim label removed and the job deleted in one breath: the job no longer
    claimed still holds our finalizer, so its mirror goes, then the finalizer and the
    record, and the deletion completes."""
    await start_dispatcher(claim={"namespaces": [namespace], "labelSelector": "team=a"})
    async with namespace_editor(control_plane, admin_clients["manager"], namespace) as user:
        jobs = Resource(user, TRAINJOBS)
        job = await jobs.create(full_job("brief", namespace, labels={"team": "a"}),
                                namespace=namespace)
        fleet = Fleet(admin_clients, namespace)
        await eventually(lambda: fleet.mirrors_of("brief"), timeout=15)
        await jobs.merge_patch("brief", {"metadata": {"labels": {"team": None}}},
                               namespace=namespace)
        await jobs.delete("brief", namespace=namespace)
        await eventually(lambda: _gone(jobs, "brief", namespace), timeout=15)
    assert await fleet.mirrors_of("brief") == []
    assert await placement_of(admin_clients["manager"], namespace,
                              job["metadata"]["uid"]) is None
    assert not await fleet.invariants()


async def test_a_job_an_earlier_version_placed_that_is_no_longer_claimed_is_released(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    """An earlier version placed the job by annotation and finalizer (no record); the
    claim no longer matches it. Nothing adopts it, but our finalizer is ours to clean
    up: its mirror (ours by origin label and manager UID) goes, then the finalizer, with
    an event saying why; the job can then be deleted."""
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    job = await jobs.create(full_job("former", namespace, labels={"team": "b"}),
                            namespace=namespace)
    await Resource(admin_clients["worker-b"], TRAINJOBS).create(
        KIND.build_mirror(job, origin=namespace, local_queue=""), namespace=namespace)
    await jobs.merge_patch("former", {"metadata": {
        "finalizers": [c.FINALIZER],
        "annotations": {c.ANNOTATION_CLUSTER: "worker-b", c.ANNOTATION_DEMAND: "cpu=4"}}},
        namespace=namespace)
    await start_dispatcher(
        claim={"namespaces": [namespace], "labelSelector": "team=a"},
        workers={"static": [
            {"name": w, "kubeconfig": str(control_plane.clusters[w].kubeconfig_path),
             "quota": QUOTA} for w in WORKERS]})
    fleet = Fleet(admin_clients, namespace)

    async def released() -> bool:
        current = await jobs.get("former", namespace=namespace) or {}
        return (not await fleet.mirrors_of("former")
                and c.FINALIZER not in (current["metadata"].get("finalizers") or []))
    await eventually(released, timeout=20)
    await eventually(lambda: events_of(admin_clients["manager"], namespace, "former",
                                       c.REASON_NOT_CLAIMED), timeout=10)
    assert await placement_of(admin_clients["manager"], namespace,
                              job["metadata"]["uid"]) is None
    await jobs.delete("former", namespace=namespace)
    await eventually(lambda: _gone(jobs, "former", namespace), timeout=10)
    assert not await fleet.invariants()


async def _gone(jobs: Resource, name: str, namespace: str) -> bool:
    return await jobs.get(name, namespace=namespace) is None


async def _more_than(read: Any, floor: float) -> bool:
    return bool(read() > floor)


async def test_a_priority_label_a_user_writes_does_not_pass_an_older_job(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    """The label `kueue.x-k8s.io/priority-class` names a WorkloadPriorityClass only: a
    user who labels a job with the Kubernetes class `system-cluster-critical` (which
    every API server has) gets priority 0, behind an older job, and is told why."""
    admin = admin_clients["manager"]
    assert await Resource(admin, ResourceKind("scheduling.k8s.io", "v1", "priorityclasses",
                                              namespaced=False)).get(
        "system-cluster-critical") is not None
    fleet = Fleet(admin_clients, namespace)
    await start(start_dispatcher, control_plane)
    async with namespace_editor(control_plane, admin, namespace) as user:
        jobs = Resource(user, TRAINJOBS)
        for name in ("running-a", "running-b"):  # both workers full
            await jobs.create(full_job(name, namespace), namespace=namespace)
        for name in ("running-a", "running-b"):
            await eventually(lambda n=name: fleet.mirrors_of(n), timeout=20)
        await jobs.create(full_job("older", namespace), namespace=namespace)
        await asyncio.sleep(1.1)  # creation times count in seconds: older is older
        await jobs.create(full_job("labelled", namespace, labels={
            c.LABEL_PRIORITY_CLASS: "system-cluster-critical"}), namespace=namespace)

        async def told_why() -> dict[str, Any] | None:
            shown = dispatched(await jobs.get("labelled", namespace=namespace))
            return shown if "priority 0:" in shown.get("message", "") else None
        shown = await eventually(told_why, timeout=20)
        assert shown["reason"] == c.REASON_WAITING_FOR_QUOTA
        assert "'system-cluster-critical', which is no WorkloadPriorityClass" in shown[
            "message"]

        await jobs.delete("running-a", namespace=namespace)
        await eventually(lambda: fleet.mirrors_of("older"), timeout=30)
        assert await fleet.mirrors_of("labelled") == []
        assert not await fleet.within_quota()
        assert not await fleet.invariants()
