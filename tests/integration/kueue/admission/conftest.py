"""The plane of the tests of the dispatcher as the AdmissionCheck of a real Kueue (#25).

A manager running a real Kueue manager, whose ClusterQueues wait for an AdmissionCheck
whose controllerName is the dispatcher's instead of MultiKueue's, and one worker without
Kueue running the real Trainer chain on kwok nodes. The manager runs no Trainer:
`managedBy` keeps it out anyway. Kueue creates each job's Workload and keeps the job
suspended; the dispatcher places it while Kueue suspends it and sets our check Ready
naming the worker once the mirror exists. Every test gets a namespace of its own on
both clusters and an AdmissionCheck named after it (`ns`); `queues` gives it
ClusterQueues waiting for that check.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.kueue_objects import (
    ADMISSION_CHECKS,
    API_VERSION,
    FIELD_MANAGER,
    WORKLOADS,
    setup_queues,
)
from devkit.localcluster.trainer import chain_crd_files
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.app import Dispatcher
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import DELETED
from dispatcher.kube.resource import NAMESPACES, Resource
from tests.conftest import KUEUE_SERVED, WORKER_NODES
from tests.integration.conftest import (
    DispatcherRunner,
    connect_all,
    install_timed_runtime,
    shut_down,
    watching,
)

MANAGER, WORKER = "manager", "worker-a"
CONTROLLER = "dispatcher.trainjob.io/multicluster"
WORKER_QUOTA = {"cpu": "16", "memory": "64Gi"}
QUEUE_QUOTA = {"cpu": "100", "memory": "400Gi"}
"""The default ClusterQueue holds more than the worker: Kueue may admit what no worker fits."""
LOCAL_QUEUE = "team"
RUN_SECONDS = 2.0


@dataclass
class Plane:
    plane: LocalControlPlane
    clients: dict[str, ClusterClient]

    @property
    def manager(self) -> ClusterClient:
        return self.clients[MANAGER]

    @property
    def worker(self) -> ClusterClient:
        return self.clients[WORKER]


@pytest_asyncio.fixture(scope="package")
async def admission_plane() -> AsyncIterator[Plane]:
    plane = LocalControlPlane()
    clients: dict[str, ClusterClient] = {}
    try:
        await plane.start([MANAGER, WORKER], controllers=[MANAGER, WORKER],
                          crd_files=chain_crd_files(kueue=True, kueue_served=KUEUE_SERVED))
        await plane.clusters[WORKER].start_trainer(WORKER_NODES)
        await plane.clusters[MANAGER].start_kueue()
        clients = await connect_all(plane)
        await install_timed_runtime(clients, RUN_SECONDS)
        yield Plane(plane=plane, clients=clients)
    finally:
        await shut_down(plane, clients)


@pytest_asyncio.fixture
async def ns(admission_plane: Plane) -> AsyncIterator[str]:
    """A namespace on both clusters, and on the manager an AdmissionCheck of the same
    name whose controller is the dispatcher."""
    name = f"ac-{uuid.uuid4().hex[:8]}"
    for client in admission_plane.clients.values():
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    await Resource(admission_plane.manager, ADMISSION_CHECKS).apply({
        "apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": name},
        "spec": {"controllerName": CONTROLLER}}, field_manager=FIELD_MANAGER)
    yield name
    await Resource(admission_plane.worker, NAMESPACES).delete(name)


async def queues(plane: Plane, ns: str, *, suffix: str = "", quota: dict[str, str] = QUEUE_QUOTA,
                 **options: Any) -> str:
    """A ClusterQueue `cq-<ns><suffix>` waiting for the test's AdmissionCheck, and its
    LocalQueue `team<suffix>` in the test's namespace (its name returned)."""
    local_queue = f"{LOCAL_QUEUE}{suffix}"
    await setup_queues(plane.manager, cluster_queue_name=f"cq-{ns}{suffix}",
                       local_queue_name=local_queue, namespaces=[ns], quota=quota,
                       admission_check=ns, **options)
    return local_queue


@pytest_asyncio.fixture
async def dispatchers(admission_plane: Plane, ns: str) -> AsyncIterator[DispatcherRunner]:
    runner = DispatcherRunner(admission_plane.plane, ns)
    yield runner
    await runner.stop()


async def start(plane: Plane, runner: DispatcherRunner, **overrides: Any) -> Dispatcher:
    """A dispatcher serving our checks, with the worker (unless `workers` says others)."""
    kubeconfig = str(plane.plane.clusters[WORKER].kubeconfig_path)
    settings: dict[str, Any] = {
        "admissionCheck": {"controllerName": CONTROLLER},
        "workers": {"static": [{"name": WORKER, "kubeconfig": kubeconfig,
                                "quota": WORKER_QUOTA}]}}
    return await runner(manager_kubeconfig=plane.plane.clusters[MANAGER].kubeconfig(),
                        **{**settings, **overrides})


async def submit(plane: Plane, ns: str, name: str, *, queue: str = LOCAL_QUEUE,
                 labels: dict[str, str] | None = None, **kwargs: Any) -> None:
    await Resource(plane.manager, TRAINJOBS).create(
        trainjob(name, ns, managed_by=MANAGED_BY_MULTIKUEUE,
                 labels={c.LABEL_KUEUE_QUEUE: queue, **(labels or {})}, **kwargs),
        namespace=ns)


async def workloads(plane: Plane, ns: str) -> dict[str, dict[str, Any]]:
    """The namespace's Workloads on the manager, by the name of the job owning each."""
    listed = await Resource(plane.manager, WORKLOADS).list(namespace=ns)
    return {ref["name"]: wl for wl in listed["items"]
            for ref in wl["metadata"].get("ownerReferences") or [] if ref.get("controller")}


async def workload_of(plane: Plane, ns: str, job: str | None = None) -> dict[str, Any] | None:
    """The Workload of `job` (or the namespace's only one)."""
    found = await workloads(plane, ns)
    if job is None:
        return next(iter(found.values()), None)
    return found.get(job)


def our_check(workload: dict[str, Any] | None, ns: str) -> dict[str, Any]:
    for entry in ((workload or {}).get("status") or {}).get("admissionChecks") or []:
        if entry["name"] == ns:
            return dict(entry)
    return {}


@dataclass
class LiveMirrors:
    """The mirrors live on the worker (created, not being deleted), and the most at once."""

    live: set[str] = field(default_factory=set)
    most: int = 0
    uids: dict[str, set[str]] = field(default_factory=dict)
    """Every UID seen of each mirror (by name): one per mirror created."""

    def seen(self, event_type: str, mirror: dict[str, Any]) -> None:
        name = mirror["metadata"]["name"]
        self.uids.setdefault(name, set()).add(mirror["metadata"]["uid"])
        gone = event_type == DELETED or bool(mirror["metadata"].get("deletionTimestamp"))
        (self.live.discard if gone else self.live.add)(name)
        self.most = max(self.most, len(self.live))


@contextlib.asynccontextmanager
async def watch_mirrors(plane: Plane, ns: str) -> AsyncIterator[LiveMirrors]:
    """Every change of the namespace's mirrors on the worker, over the block."""
    record = LiveMirrors()
    async with watching(plane.worker, ns, record.seen):
        yield record
