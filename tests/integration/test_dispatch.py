"""The core dispatcher on real API servers: a manager and two workers."""

from __future__ import annotations

from typing import Any

import pytest

from devkit.factories import trainjob
from devkit.localcluster.trainer import end_pods
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import EVENTS, NAMESPACES, Resource
from tests.integration.conftest import StartDispatcher, eventually, trainjobs_refused

pytestmark = pytest.mark.integration
WORKERS = ("worker-a", "worker-b")


def a_roomier_than_b(kubeconfigs: dict[str, str]) -> list[dict[str, Any]]:
    """Static workers where MostFree tries worker-a first."""
    return [{"name": "worker-a", "kubeconfig": kubeconfigs["worker-a"],
             "quota": {"cpu": "64", "memory": "64Gi"}},
            {"name": "worker-b", "kubeconfig": kubeconfigs["worker-b"],
             "quota": {"cpu": "8", "memory": "8Gi"}}]


def jobs_on(clients: dict[str, ClusterClient], cluster: str) -> Resource:
    return Resource(clients[cluster], TRAINJOBS)


async def mirrors_of(clients: dict[str, ClusterClient], name: str, namespace: str
                     ) -> dict[str, dict[str, Any]]:
    found = {}
    for worker in WORKERS:
        obj = await jobs_on(clients, worker).get(name, namespace=namespace)
        if obj is not None:
            found[worker] = obj
    return found


async def placed_mirror(clients: dict[str, ClusterClient], name: str, namespace: str
                        ) -> tuple[str, dict[str, Any]]:
    async def check() -> tuple[str, dict[str, Any]] | None:
        found = await mirrors_of(clients, name, namespace)
        return next(iter(found.items())) if found else None
    result: tuple[str, dict[str, Any]] = await eventually(check)
    return result


async def mirror_on(clients: dict[str, ClusterClient], worker: str, name: str,
                    namespace: str) -> dict[str, Any]:
    """Wait until `worker` has an object called `name`; return it."""
    async def check() -> dict[str, Any] | None:
        return await jobs_on(clients, worker).get(name, namespace=namespace)
    found: dict[str, Any] = await eventually(check)
    return found


def condition_of(job: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return None


def untouched_by_us(now: dict[str, Any], before: dict[str, Any]) -> None:
    """No metadata or spec of `before` changed (its own Trainer may write its status)."""
    for field in ("labels", "annotations", "finalizers", "generation"):
        assert now["metadata"].get(field) == before["metadata"].get(field), field
    assert now["spec"] == before["spec"]


async def events_for(clients: dict[str, ClusterClient], namespace: str, name: str
                     ) -> list[dict[str, Any]]:
    listed = await Resource(clients["manager"], EVENTS).list(namespace=namespace)
    return [e for e in listed["items"] if e["regarding"]["name"] == name]


async def test_claimed_job_runs_on_one_worker_and_unclaimed_is_untouched(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str
) -> None:
    await start_dispatcher()
    manager = jobs_on(admin_clients, "manager")
    await manager.create(trainjob("claimed", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                  labels={"team": "vision"}, annotations={"note": "kept"}),
                         namespace=namespace)
    untouched = await manager.create(trainjob("plain", namespace), namespace=namespace)

    worker, mirror = await placed_mirror(admin_clients, "claimed", namespace)
    job = await manager.get("claimed", namespace=namespace)
    assert job is not None
    assert job["metadata"]["annotations"][c.ANNOTATION_CLUSTER] == worker
    assert c.FINALIZER in job["metadata"]["finalizers"]
    # managedBy is left out of the mirror, so the worker defaults it to its own trainer.
    assert mirror["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
    assert mirror["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert mirror["metadata"]["labels"]["team"] == "vision"
    assert mirror["metadata"]["labels"][c.LABEL_ORIGIN] == namespace
    assert mirror["metadata"]["annotations"]["note"] == "kept"
    assert mirror["metadata"]["annotations"][c.ANNOTATION_MANAGER_UID] == job["metadata"]["uid"]
    assert set(await mirrors_of(admin_clients, "claimed", namespace)) == {worker}

    assert await mirrors_of(admin_clients, "plain", namespace) == {}
    plain = await manager.get("plain", namespace=namespace)
    assert plain is not None  # the manager's own Trainer runs it and writes its status
    untouched_by_us(plain, untouched)
    assert condition_of(plain, c.CONDITION_DISPATCHED) is None


async def test_mirror_status_is_copied_and_completion_cleans_up(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str
) -> None:
    await start_dispatcher()
    manager = jobs_on(admin_clients, "manager")
    await manager.create(trainjob("train", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                  num_nodes=2), namespace=namespace)
    worker, _ = await placed_mirror(admin_clients, "train", namespace)
    # One Job of two pods: a JobSet counts its replicated job's Jobs, not their pods.
    running = [{"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 0,
                "suspended": 0}]

    async def synced() -> dict[str, Any] | None:
        job = await manager.get("train", namespace=namespace)
        status = (job or {}).get("status") or {}
        return job if status.get("jobsStatus") == running else None
    job = await eventually(synced, timeout=30)  # its pods run on the worker's kwok nodes
    mirror = await jobs_on(admin_clients, worker).get("train", namespace=namespace)
    assert mirror is not None and mirror["status"]["jobsStatus"] == running
    dispatched = condition_of(job, c.CONDITION_DISPATCHED)
    assert dispatched is not None and dispatched["status"] == "True"
    assert worker in dispatched["message"]

    await eventually(lambda: end_pods(admin_clients[worker], namespace, "train"))

    async def finished() -> dict[str, Any] | None:
        job = await manager.get("train", namespace=namespace)
        done = condition_of(job, "Complete")
        if done and done["status"] == "True" and not (job or {})["metadata"].get("finalizers"):
            return job
        return None
    job = await eventually(finished, timeout=30)
    assert condition_of(job, "Complete")["reason"] == "AllJobsCompleted"  # type: ignore[index]
    assert job["status"]["jobsStatus"] == [{**running[0], "active": 0, "ready": 0,
                                            "succeeded": 1}]
    assert await mirrors_of(admin_clients, "train", namespace) == {}


async def test_failed_mirror_fails_the_manager_job_without_rerun(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str
) -> None:
    await start_dispatcher()
    manager = jobs_on(admin_clients, "manager")
    await manager.create(trainjob("doomed", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                         namespace=namespace)
    worker, _ = await placed_mirror(admin_clients, "doomed", namespace)
    await eventually(lambda: end_pods(admin_clients[worker], namespace, "doomed", fail=True),
                     timeout=30)

    async def failed_on_manager() -> dict[str, Any] | None:
        job = await manager.get("doomed", namespace=namespace)
        cond = condition_of(job, "Failed")
        return job if cond and not (job or {})["metadata"].get("finalizers") else None
    job = await eventually(failed_on_manager, timeout=30)
    assert condition_of(job, "Failed")["reason"] == "FailedJobs"  # type: ignore[index]
    assert c.ANNOTATION_EVICTIONS not in job["metadata"].get("annotations", {})
    assert await mirrors_of(admin_clients, "doomed", namespace) == {}
    events = await events_for(admin_clients, namespace, "doomed")
    assert any(e["reason"] == c.REASON_FINISHED for e in events)


async def test_deleting_the_manager_job_deletes_the_mirror(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str
) -> None:
    await start_dispatcher()
    manager = jobs_on(admin_clients, "manager")
    await manager.create(trainjob("short-lived", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                         namespace=namespace)
    await placed_mirror(admin_clients, "short-lived", namespace)
    await manager.delete("short-lived", namespace=namespace)

    async def all_gone() -> bool:
        return (await manager.get("short-lived", namespace=namespace) is None
                and await mirrors_of(admin_clients, "short-lived", namespace) == {})
    await eventually(all_gone)


async def test_a_namespace_deleted_on_the_workers_is_made_again_for_the_next_mirror(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str
) -> None:
    """The dispatcher remembers which namespaces it made on each worker; when one is
    deleted there (by the namespace controller, after its content), the next create gets
    404, the namespace is forgotten, made again, and the mirror created: no
    MirrorRejected until a restart."""
    await start_dispatcher()
    manager = jobs_on(admin_clients, "manager")
    await manager.create(trainjob("first", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                         namespace=namespace)
    await placed_mirror(admin_clients, "first", namespace)
    await manager.delete("first", namespace=namespace)

    async def namespaces_gone() -> bool:
        if await manager.get("first", namespace=namespace) is not None:
            return False
        for worker in WORKERS:
            namespaces = Resource(admin_clients[worker], NAMESPACES)
            if await namespaces.get(namespace) is not None:
                await namespaces.delete(namespace)
                return False
        return True
    await eventually(namespaces_gone, timeout=120, interval=1)

    await manager.create(trainjob("second", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                         namespace=namespace)
    worker, _ = await placed_mirror(admin_clients, "second", namespace)
    assert await Resource(admin_clients[worker], NAMESPACES).get(namespace) is not None

    async def dispatched() -> dict[str, Any] | None:
        return condition_of(await manager.get("second", namespace=namespace),
                            c.CONDITION_DISPATCHED)
    condition = await eventually(dispatched, timeout=15)
    assert condition["reason"] != c.REASON_MIRROR_REJECTED, condition
    rejected = [e for e in await events_for(admin_clients, namespace, "second")
                if e["reason"] == c.REASON_MIRROR_REJECTED]
    assert rejected == []


async def test_orphan_mirror_is_garbage_collected(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str
) -> None:
    await start_dispatcher()
    orphan = trainjob("orphan", namespace, labels={c.LABEL_ORIGIN: namespace},
                      annotations={c.ANNOTATION_MANAGER_UID: "no-such-uid"})
    other_origin = trainjob("foreign", namespace, labels={c.LABEL_ORIGIN: "someone-else"})
    worker_b = jobs_on(admin_clients, "worker-b")
    await worker_b.create(orphan, namespace=namespace)
    await worker_b.create(other_origin, namespace=namespace)

    async def collected() -> bool:
        return await worker_b.get("orphan", namespace=namespace) is None
    await eventually(collected, timeout=10)
    assert await worker_b.get("foreign", namespace=namespace) is not None


async def test_existing_object_on_a_worker_is_left_alone(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    worker_a = jobs_on(admin_clients, "worker-a")
    squatter = await worker_a.create(trainjob("contested", namespace), namespace=namespace)
    # worker-a has more room, so the dispatcher tries it first and meets the conflict.
    await start_dispatcher(workers={"static": a_roomier_than_b(worker_kubeconfigs)})
    manager = jobs_on(admin_clients, "manager")
    await manager.create(trainjob("contested", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                         namespace=namespace)
    await mirror_on(admin_clients, "worker-b", "contested", namespace)
    still = await worker_a.get("contested", namespace=namespace)
    assert still is not None
    assert still["metadata"]["uid"] == squatter["metadata"]["uid"]
    untouched_by_us(still, squatter)  # the worker's own Trainer runs it
    job = await manager.get("contested", namespace=namespace)
    assert job is not None and job["metadata"]["annotations"][c.ANNOTATION_CLUSTER] == "worker-b"
    events = await eventually(lambda: _events_with(admin_clients, namespace, "contested",
                                                   c.REASON_NAME_CONFLICT))
    assert "worker-a" in events[0]["note"]


async def _events_with(clients: dict[str, ClusterClient], namespace: str, name: str,
                       reason: str) -> list[dict[str, Any]]:
    return [e for e in await events_for(clients, namespace, name) if e["reason"] == reason]


async def test_worker_that_rejects_the_mirror_leads_elsewhere_with_the_reason(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    # worker-a refuses TrainJobs in this namespace, as an admission webhook would.
    async with trainjobs_refused(admin_clients["worker-a"], namespace, "CREATE",
                                 "runtime torch-distributed is not allowed here"):
        await start_dispatcher(workers={"static": a_roomier_than_b(worker_kubeconfigs)})
        manager = jobs_on(admin_clients, "manager")
        await manager.create(trainjob("picky", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                             namespace=namespace)
        await mirror_on(admin_clients, "worker-b", "picky", namespace)
        events = await eventually(lambda: _events_with(admin_clients, namespace, "picky",
                                                       c.REASON_MIRROR_REJECTED))
        assert "not allowed here" in events[0]["note"]
        assert await jobs_on(admin_clients, "worker-a").get("picky", namespace=namespace) is None


async def test_suspend_removes_the_mirror_and_resume_places_again(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str
) -> None:
    await start_dispatcher()
    manager = jobs_on(admin_clients, "manager")
    await manager.create(trainjob("pausable", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                  suspend=True), namespace=namespace)

    async def waiting_suspended() -> dict[str, Any] | None:
        job = await manager.get("pausable", namespace=namespace)
        cond = condition_of(job, c.CONDITION_DISPATCHED)
        return job if cond and cond["reason"] == c.REASON_SUSPENDED else None
    await eventually(waiting_suspended)
    assert await mirrors_of(admin_clients, "pausable", namespace) == {}

    await manager.merge_patch("pausable", {"spec": {"suspend": False}}, namespace=namespace)
    await placed_mirror(admin_clients, "pausable", namespace)

    await manager.merge_patch("pausable", {"spec": {"suspend": True}}, namespace=namespace)

    async def unplaced() -> dict[str, Any] | None:
        job = await manager.get("pausable", namespace=namespace)
        gone = await mirrors_of(admin_clients, "pausable", namespace) == {}
        annotations = (job or {})["metadata"].get("annotations") or {}
        told = (condition_of(job, c.CONDITION_DISPATCHED) or {}).get("reason")
        # The view is written before the status: wait for both.
        return (job if gone and c.ANNOTATION_CLUSTER not in annotations
                and told == c.REASON_SUSPENDED else None)
    job = await eventually(unplaced)
    assert not job["metadata"].get("finalizers")
    assert condition_of(job, c.CONDITION_DISPATCHED)["reason"] == c.REASON_SUSPENDED  # type: ignore[index]


async def test_missing_runtime_waits_with_reason_then_places(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    runtime_installed: dict[str, Any],
) -> None:
    from dispatcher.api.trainer import TRAINING_RUNTIMES

    manager = jobs_on(admin_clients, "manager")
    runtimes = Resource(admin_clients["manager"], TRAINING_RUNTIMES)
    runtime = dict(runtime_installed, kind="TrainingRuntime",
                   metadata={"name": "local-torch", "namespace": namespace})
    # The manager's Trainer refuses a job whose runtime does not exist; the runtime can
    # still go away after the job was made (here before the dispatcher starts).
    await runtimes.create(runtime, namespace=namespace)
    await manager.create(trainjob("needs-runtime", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                  runtime="local-torch", runtime_kind="TrainingRuntime"),
                         namespace=namespace)
    await runtimes.delete("local-torch", namespace=namespace)
    await start_dispatcher()

    async def waiting() -> dict[str, Any] | None:
        job = await manager.get("needs-runtime", namespace=namespace)
        cond = condition_of(job, c.CONDITION_DISPATCHED)
        return job if cond and cond["reason"] == c.REASON_RUNTIME_NOT_FOUND else None
    await eventually(waiting)
    for cluster in ("manager", *WORKERS):
        await Resource(admin_clients[cluster], TRAINING_RUNTIMES).create(runtime,
                                                                         namespace=namespace)
    await placed_mirror(admin_clients, "needs-runtime", namespace)


