"""The dispatcher as the AdmissionCheck of a real Kueue on its manager (issue #25).

A plane of its own: a manager running a real Kueue manager (its ClusterQueue waits for
an AdmissionCheck whose controllerName is the dispatcher's, instead of MultiKueue's),
and one worker without Kueue running the real Trainer chain on kwok nodes. The manager
runs no Trainer: `managedBy` keeps it out anyway. Kueue creates each job's Workload and
keeps the job suspended; the dispatcher places it while Kueue suspends it, sets our
check Ready naming the worker once the mirror exists, and Kueue then unsuspends the
manager job; a job that fits its ClusterQueue but no worker is Rejected with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
import yaml

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.kueue_objects import (
    ADMISSION_CHECKS,
    API_VERSION,
    FIELD_MANAGER,
    WORKLOADS,
    setup_queues,
    wait_active,
)
from devkit.localcluster.trainer import chain_crd_files, kwok_timed
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.resource import EVENTS, NAMESPACES, Resource
from tests.conftest import WORKER_NODES
from tests.integration.conftest import SAMPLES, DispatcherRunner, eventually
from tests.integration.kueue.conftest import conditions, is_true

pytestmark = pytest.mark.integration
MANAGER, WORKER = "manager", "worker-a"
CONTROLLER = "dispatcher.trainjob.io/multicluster"
WORKER_QUOTA = {"cpu": "16", "memory": "64Gi"}
QUEUE_QUOTA = {"cpu": "100", "memory": "400Gi"}
"""The manager's ClusterQueue holds more than the worker: Kueue may admit what no worker fits."""
LOCAL_QUEUE = "team"
RUN_SECONDS = 2.0


@dataclass
class Plane:
    plane: LocalControlPlane
    clients: dict[str, ClusterClient]


@pytest_asyncio.fixture(scope="module")
async def admission_plane() -> AsyncIterator[Plane]:
    plane = LocalControlPlane()
    clients: dict[str, ClusterClient] = {}
    try:
        await plane.start([MANAGER, WORKER], controllers=[MANAGER, WORKER],
                          crd_files=chain_crd_files(kueue=True))
        await plane.clusters[WORKER].start_trainer(WORKER_NODES)
        await plane.clusters[MANAGER].start_kueue()
        for name, cluster in plane.clusters.items():
            clients[name] = await ClusterClient.from_kubeconfig(
                name=name, kubeconfig=cluster.kubeconfig(),
                settings=ClientSettings(qps=1000, burst=1000, timeout_seconds=10))
        runtime = kwok_timed(yaml.safe_load(
            (SAMPLES / "clustertrainingruntime-torch.yaml").read_text()), run_seconds=RUN_SECONDS)
        for client in clients.values():
            await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(runtime,
                                                                    field_manager="tests")
        yield Plane(plane=plane, clients=clients)
    finally:
        for client in clients.values():
            await client.close()
        for cluster in plane.clusters.values():
            await cluster.stop_trainer()
        plane.stop()


@pytest_asyncio.fixture
async def ns(admission_plane: Plane) -> AsyncIterator[str]:
    """A namespace on both clusters, and on the manager a ClusterQueue of its own waiting
    for an AdmissionCheck of its own, whose controller is the dispatcher."""
    name = f"ac-{uuid.uuid4().hex[:8]}"
    manager = admission_plane.clients[MANAGER]
    for client in admission_plane.clients.values():
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    await Resource(manager, ADMISSION_CHECKS).apply({
        "apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": name},
        "spec": {"controllerName": CONTROLLER}}, field_manager=FIELD_MANAGER)
    await setup_queues(manager, cluster_queue_name=f"cq-{name}", local_queue_name=LOCAL_QUEUE,
                       namespaces=[name], quota=QUEUE_QUOTA, admission_check=name)
    yield name


@pytest_asyncio.fixture
async def dispatchers(admission_plane: Plane, ns: str) -> AsyncIterator[DispatcherRunner]:
    runner = DispatcherRunner(admission_plane.plane, ns)
    yield runner
    await runner.stop()


async def start(plane: Plane, runner: DispatcherRunner) -> Any:
    kubeconfig = str(plane.plane.clusters[WORKER].kubeconfig_path)
    return await runner(
        manager_kubeconfig=plane.plane.clusters[MANAGER].kubeconfig(),
        admissionCheck={"controllerName": CONTROLLER},
        workers={"static": [{"name": WORKER, "kubeconfig": kubeconfig,
                             "quota": WORKER_QUOTA}]})


async def submit(plane: Plane, ns: str, name: str, **kwargs: Any) -> None:
    await Resource(plane.clients[MANAGER], TRAINJOBS).create(
        trainjob(name, ns, managed_by=MANAGED_BY_MULTIKUEUE,
                 labels={c.LABEL_KUEUE_QUEUE: LOCAL_QUEUE}, **kwargs), namespace=ns)


async def workload_of(plane: Plane, ns: str) -> dict[str, Any] | None:
    listed = await Resource(plane.clients[MANAGER], WORKLOADS).list(namespace=ns)
    items = listed["items"]
    return items[0] if items else None


def our_check(workload: dict[str, Any] | None, ns: str) -> dict[str, Any]:
    for entry in ((workload or {}).get("status") or {}).get("admissionChecks") or []:
        if entry["name"] == ns:
            return dict(entry)
    return {}


async def test_kueue_admits_the_dispatcher_places_and_the_job_runs(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    manager = admission_plane.clients[MANAGER]
    await start(admission_plane, dispatchers)
    await wait_active(manager, ADMISSION_CHECKS, [ns])
    check = await Resource(manager, ADMISSION_CHECKS).get(ns)
    assert conditions(check)["Active"]["reason"] == c.REASON_CHECK_ACTIVE
    await submit(admission_plane, ns, "runs")

    async def ready() -> dict[str, Any] | None:
        workload = await workload_of(admission_plane, ns)
        return workload if our_check(workload, ns).get("state") == "Ready" else None
    workload = await eventually(ready, timeout=60, interval=0.2)
    assert WORKER in our_check(workload, ns)["message"]
    mirror = await Resource(admission_plane.clients[WORKER], TRAINJOBS).get("runs", namespace=ns)
    assert mirror is not None and not mirror["spec"].get("suspend")
    assert mirror["spec"].get("managedBy") != MANAGED_BY_MULTIKUEUE
    assert not any(p.get("manager") == "kueue.x-k8s.io/manager"
                   for p in mirror["spec"].get("runtimePatches") or [])

    async def complete() -> dict[str, Any] | None:
        job = await Resource(manager, TRAINJOBS).get("runs", namespace=ns)
        return job if is_true(job, "Complete") else None
    job = await eventually(complete, timeout=90, interval=0.2)
    assert job["spec"].get("suspend") is False, "Kueue unsuspended the manager job"
    assert (job["metadata"].get("annotations") or {})[c.ANNOTATION_CLUSTER] == WORKER

    async def finished() -> dict[str, Any] | None:
        found = await workload_of(admission_plane, ns)
        return found if is_true(found, "Finished") else None
    workload = await eventually(finished, timeout=30, interval=0.2)
    assert is_true(workload, "Admitted") or our_check(workload, ns)["state"] == "Ready"


async def test_a_job_that_fits_its_cluster_queue_but_no_worker_is_rejected(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    manager = admission_plane.clients[MANAGER]
    await start(admission_plane, dispatchers)
    await wait_active(manager, ADMISSION_CHECKS, [ns])
    await submit(admission_plane, ns, "too-big", num_nodes=2,
                 resources_per_node={"requests": {"cpu": "40", "memory": "8Gi"}})

    async def rejection() -> str:
        """Kueue's event on the Workload: it deactivated it for our Rejected check, whose
        message it quotes (the check itself is reset to Pending right after)."""
        listed = await Resource(manager, EVENTS).list(namespace=ns)
        return next((str(e.get("note")) for e in listed["items"]
                     if e.get("reason") == "AdmissionCheckRejected"), "")
    note = await eventually(rejection, timeout=60, interval=0.2)
    assert "no worker can hold it" in note and "cpu" in note, note

    async def deactivated() -> dict[str, Any] | None:
        found = await workload_of(admission_plane, ns)
        return found if (found or {}).get("spec", {}).get("active") is False else None
    await eventually(deactivated, timeout=30, interval=0.2)

    async def told() -> dict[str, Any] | None:
        job = await Resource(manager, TRAINJOBS).get("too-big", namespace=ns)
        shown = conditions(job).get(c.CONDITION_DISPATCHED, {})
        return shown if shown.get("reason") == c.REASON_CHECK_REJECTED else None
    await eventually(told, timeout=10, interval=0.2)
    job = await Resource(manager, TRAINJOBS).get("too-big", namespace=ns)
    assert job is not None and job["spec"].get("suspend") is True
    assert await Resource(admission_plane.clients[WORKER], TRAINJOBS).get(
        "too-big", namespace=ns) is None


async def test_a_check_left_pending_while_no_dispatcher_ran_is_taken_up_once(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    """The dispatcher stops with our check Active; Kueue reserves quota for a new job, its
    check Pending; a new dispatcher places it once: one record, one mirror, Ready."""
    manager = admission_plane.clients[MANAGER]
    first = await start(admission_plane, dispatchers)
    await wait_active(manager, ADMISSION_CHECKS, [ns])
    await dispatchers.stop(first)
    await submit(admission_plane, ns, "while-away")

    async def pending() -> dict[str, Any] | None:
        workload = await workload_of(admission_plane, ns)
        return (workload if is_true(workload, "QuotaReserved")
                and our_check(workload, ns).get("state") == "Pending" else None)
    await eventually(pending, timeout=30, interval=0.2)
    await start(admission_plane, dispatchers)

    async def ready() -> dict[str, Any] | None:
        workload = await workload_of(admission_plane, ns)
        return workload if our_check(workload, ns).get("state") == "Ready" else None
    await eventually(ready, timeout=60, interval=0.2)
    records = await Resource(manager, PLACEMENTS).list(namespace=f"{ns}-system")
    assert len(records["items"]) == 1, records["items"]
    mirrors = await Resource(admission_plane.clients[WORKER], TRAINJOBS).list(namespace=ns)
    assert [m["metadata"]["name"] for m in mirrors["items"]] == ["while-away"]
