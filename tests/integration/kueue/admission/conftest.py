"""The plane of the tests of the dispatcher as the AdmissionCheck of a real Kueue (#25).

A manager running a real Kueue manager, whose ClusterQueues wait for an AdmissionCheck
whose controllerName is the dispatcher's instead of MultiKueue's, and two workers without
Kueue running the real Trainer chain on kwok nodes. The manager runs the real Trainer
too (controller and webhooks, no nodes), which `managedBy` keeps out of the jobs. Its
ResourceFlavor has node labels no worker node carries, which Kueue writes into its own
runtime patch of each admitted job: they must never reach a mirror. Kueue creates each
job's Workload and keeps the job suspended; the dispatcher places it while Kueue
suspends it and sets our check Ready naming the worker once the mirror exists. Every
test gets a namespace of its own on every cluster and an AdmissionCheck named after it
(`ns`) whose controllerName is the test's own (`controller_of(ns)`: one dispatcher per
controller name, so no test's dispatcher judges another's jobs); `queues` gives it
ClusterQueues waiting for that check. `start` runs a dispatcher with the first worker
(or `workers=both(plane)`). `watch_mirrors` follows the test's mirrors on both workers;
`records_frozen` has the manager keep the dispatcher's records as first written (a
crash between record and mirror, with `trainjobs_refused`); `Cable` relays a worker's
API server so a test can cut it off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from kubernetes_asyncio.client.exceptions import ApiException

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
from dispatcher.api.placement import PLACEMENTS, PlacementRecord, placement_body
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.app import Dispatcher
from dispatcher.kinds.trainjob import KUEUE_RUNTIME_PATCH_MANAGER
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import NAMESPACES, Resource, ResourceKind
from tests.conftest import KUEUE_SERVED, WORKER_NODES
from tests.integration.conftest import (
    DispatcherRunner,
    connect_all,
    eventually,
    install_timed_runtime,
    shut_down,
    watching,
)

MANAGER, WORKER, WORKER_B = "manager", "worker-a", "worker-b"
FLAVOR_LABELS = {"flavor.test/pool": "manager-side"}
"""The manager's ResourceFlavor's node labels: no worker node has them."""
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

    @property
    def workers(self) -> dict[str, ClusterClient]:
        return {name: self.clients[name] for name in (WORKER, WORKER_B)}


def controller_of(ns: str) -> str:
    """The controllerName of the test's AdmissionCheck and dispatcher."""
    return f"dispatcher.trainjob.io/{ns}"


@pytest_asyncio.fixture(scope="package")
async def admission_plane() -> AsyncIterator[Plane]:
    plane = LocalControlPlane()
    clients: dict[str, ClusterClient] = {}
    try:
        names = [MANAGER, WORKER, WORKER_B]
        await plane.start(names, controllers=names,
                          crd_files=chain_crd_files(kueue=True, kueue_served=KUEUE_SERVED))
        for name in names:
            await plane.clusters[name].start_trainer(None if name == MANAGER else WORKER_NODES)
        await plane.clusters[MANAGER].start_kueue()
        clients = await connect_all(plane)
        await install_timed_runtime(clients, RUN_SECONDS)
        yield Plane(plane=plane, clients=clients)
    finally:
        await shut_down(plane, clients)


@pytest_asyncio.fixture
async def ns(admission_plane: Plane) -> AsyncIterator[str]:
    """A namespace on every cluster, and on the manager an AdmissionCheck of the same
    name whose controller is the test's dispatcher."""
    name = f"ac-{uuid.uuid4().hex[:8]}"
    for client in admission_plane.clients.values():
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    await Resource(admission_plane.manager, ADMISSION_CHECKS).apply({
        "apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": name},
        "spec": {"controllerName": controller_of(name)}}, field_manager=FIELD_MANAGER)
    yield name
    for worker in admission_plane.workers.values():
        await Resource(worker, NAMESPACES).delete(name)


async def queues(plane: Plane, ns: str, *, suffix: str = "", quota: dict[str, str] = QUEUE_QUOTA,
                 **options: Any) -> str:
    """A ClusterQueue `cq-<ns><suffix>` waiting for the test's AdmissionCheck, and its
    LocalQueue `team<suffix>` in the test's namespace (its name returned)."""
    local_queue = f"{LOCAL_QUEUE}{suffix}"
    await setup_queues(plane.manager, cluster_queue_name=f"cq-{ns}{suffix}",
                       local_queue_name=local_queue, namespaces=[ns], quota=quota,
                       admission_check=ns, flavor_labels=FLAVOR_LABELS, **options)
    return local_queue


@pytest_asyncio.fixture
async def dispatchers(admission_plane: Plane, ns: str) -> AsyncIterator[DispatcherRunner]:
    runner = DispatcherRunner(admission_plane.plane, ns)
    yield runner
    await runner.stop()


def static_worker(plane: Plane, name: str, quota: dict[str, str] = WORKER_QUOTA
                  ) -> dict[str, Any]:
    return {"name": name, "kubeconfig": str(plane.plane.clusters[name].kubeconfig_path),
            "quota": quota}


def both(plane: Plane, quota: dict[str, str] = WORKER_QUOTA) -> dict[str, Any]:
    """`workers` settings of both workers, each with `quota`."""
    return {"static": [static_worker(plane, name, quota) for name in (WORKER, WORKER_B)]}


async def start(plane: Plane, runner: DispatcherRunner, **overrides: Any) -> Dispatcher:
    """A dispatcher serving the test's checks, with the first worker (unless `workers`
    says others)."""
    settings: dict[str, Any] = {
        "admissionCheck": {"controllerName": controller_of(runner.namespace)},
        "workers": {"static": [static_worker(plane, WORKER)]}}
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


def kueue_patch(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """The manager-side Kueue's entry of the job's `spec.runtimePatches`."""
    return next((p for p in ((job or {}).get("spec") or {}).get("runtimePatches") or []
                 if p.get("manager") == KUEUE_RUNTIME_PATCH_MANAGER), None)


def flavor_selectors(patch: dict[str, Any] | None) -> list[dict[str, str]]:
    """The node selectors of the pod templates a runtime patch sets."""
    replicated = ((((patch or {}).get("trainingRuntimeSpec") or {}).get("template") or {})
                  .get("spec") or {}).get("replicatedJobs") or []
    return [((((r.get("template") or {}).get("spec") or {}).get("template") or {})
             .get("spec") or {}).get("nodeSelector") or {} for r in replicated]


def free_of_the_flavor(mirror: dict[str, Any]) -> bool:
    """No trace of the manager's flavor (or of its Kueue's patch) in a mirror."""
    return (kueue_patch(mirror) is None
            and not any(key in json.dumps(mirror["spec"]) for key in FLAVOR_LABELS))


Live = dict[str, set[str]]
"""A job's name -> the UIDs of its live mirrors (created, not being deleted)."""


@dataclass
class LiveMirrors:
    """The namespace's mirrors on the workers over a block: every UID each job's mirrors
    had (from watches), and from repeated reads of all workers, the most mirrors live at
    once and every job ever seen with two live mirrors at once (`doubled`)."""

    uids: dict[str, set[str]] = field(default_factory=dict)
    """Every UID seen of each job's mirrors, on any worker: one per mirror created."""
    most: int = 0
    doubled: dict[str, set[str]] = field(default_factory=dict)
    samples: int = 0

    def seen(self, event_type: str, mirror: dict[str, Any]) -> None:
        self.uids.setdefault(mirror["metadata"]["name"], set()).add(mirror["metadata"]["uid"])

    def sample(self, reads: list[tuple[Live, Live]], last: Live) -> None:
        """`reads`: each worker but the last read twice, before and after `last` (job ->
        live UIDs): a mirror live in both reads of its worker was live while `last` was
        read, so what they share is what was live at one moment."""
        live: dict[str, set[str]] = {job: set(uids) for job, uids in last.items()}
        for before, after in reads:
            for job, uids in before.items():
                live.setdefault(job, set()).update(uids & after.get(job, set()))
        self.samples += 1
        self.most = max(self.most, sum(len(uids) for uids in live.values()))
        for job, uids in live.items():
            if len(uids) > 1:
                self.doubled.setdefault(job, set()).update(uids)


async def live_mirrors(client: ClusterClient, ns: str) -> Live:
    """The namespace's mirrors on one worker that are not being deleted: job -> UIDs."""
    listed = await Resource(client, TRAINJOBS).list(namespace=ns, label_selector=c.LABEL_ORIGIN)
    live: dict[str, set[str]] = {}
    for mirror in listed["items"]:
        if not mirror["metadata"].get("deletionTimestamp"):
            live.setdefault(mirror["metadata"]["name"], set()).add(mirror["metadata"]["uid"])
    return live


async def _census(plane: Plane, ns: str, record: LiveMirrors, interval: float) -> None:
    *firsts, last = plane.workers.values()
    while True:
        befores = [await live_mirrors(client, ns) for client in firsts]
        latest = await live_mirrors(last, ns)
        afters = [await live_mirrors(client, ns) for client in reversed(firsts)][::-1]
        record.sample(list(zip(befores, afters, strict=True)), latest)
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def watch_mirrors(plane: Plane, ns: str, *, interval: float = 0.05
                        ) -> AsyncIterator[LiveMirrors]:
    """The namespace's mirrors on both workers, over the block."""
    record = LiveMirrors()
    async with contextlib.AsyncExitStack() as stack:
        for client in plane.workers.values():
            await stack.enter_async_context(watching(client, ns, record.seen))
        census = asyncio.create_task(_census(plane, ns, record, interval), name="test/census")
        try:
            yield record
        finally:
            census.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await census


_VAP = ResourceKind("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
                    namespaced=False)
_VAP_BINDING = ResourceKind("admissionregistration.k8s.io", "v1",
                            "validatingadmissionpolicybindings", namespaced=False)
PROBE = "frozen-probe"
"""The Placement `records_frozen` probes with (in the dispatcher's namespace)."""


@contextlib.asynccontextmanager
async def records_frozen(manager: ClusterClient, namespace: str) -> AsyncIterator[None]:
    """While inside, the manager refuses every change and deletion of the Placement
    records in `namespace` (the dispatcher's), creation still allowed: a real
    ValidatingAdmissionPolicy, in force (probed) before the body runs. A record once
    written stays as it was, whatever its writer does next."""
    policy = f"freeze-records-{namespace}"
    policies, bindings = Resource(manager, _VAP), Resource(manager, _VAP_BINDING)
    await policies.create({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [PLACEMENTS.group], "apiVersions": ["*"],
                "operations": ["UPDATE", "DELETE"], "resources": [PLACEMENTS.plural]}]},
            "validations": [{"expression": f"oldObject.metadata.namespace != '{namespace}'",
                             "message": "records frozen by the test"}],
        },
    })
    await bindings.create({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    })
    records = Resource(manager, PLACEMENTS)
    await records.create(placement_body(PlacementRecord(uid=PROBE, key=f"{namespace}/{PROBE}",
                                                        worker=""), namespace=namespace),
                         namespace=namespace)

    async def in_force() -> bool:
        try:
            await records.merge_patch(PROBE, {"spec": {"evictions": 1}}, namespace=namespace)
        except ApiException:
            return True
        return False
    try:
        await eventually(in_force, timeout=10, interval=0.2)
        yield
    finally:
        await bindings.delete(policy)
        await policies.delete(policy)

        async def probe_deleted() -> bool:
            with contextlib.suppress(ApiException):
                await records.delete(PROBE, namespace=namespace)
            return await records.get(PROBE, namespace=namespace) is None
        await eventually(probe_deleted, timeout=10, interval=0.2)


class Cable:
    """A TCP relay from a port of its own to a cluster's API server: a worker the
    dispatcher reaches through it can be cut off (`cut`, every connection closed and no
    new one accepted) and joined again (`join`, on the same port)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.removeprefix("https://").partition(":")
        self._target = (host, int(port))
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def join(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._open):
            writer.close()
        self._open.clear()

    def kubeconfig(self, kubeconfig: dict[str, Any]) -> dict[str, Any]:
        """`kubeconfig` with its server reached through the relay."""
        moved: dict[str, Any] = json.loads(json.dumps(kubeconfig))
        for cluster in moved["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        return moved

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._open |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._open -= {writer, up_writer}
