"""Fixtures for running dispatchers against the shared local control plane.

Each test's dispatcher claims only its own namespace and labels its mirrors with its own
origin, so tests share the clusters without touching each other's jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.trainer import end_pods, kwok_timed
from dispatcher.admin import ensure_namespace
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, TRAINJOBS
from dispatcher.app import Dispatcher
from dispatcher.config import DispatcherConfig
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import NAMESPACES, Resource, ResourceKind

SAMPLES = Path(__file__).resolve().parents[2] / "config" / "samples"
DEFAULT_QUOTA = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "16"}
FAST_LEADER_ELECTION = {"enabled": True, "leaseDurationSeconds": 4,
                        "renewDeadlineSeconds": 3, "retryPeriodSeconds": 1}
"""`leaderElection` with a short Lease, so a standby takes over within seconds."""


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@pytest_asyncio.fixture(scope="session")
async def runtime_installed(admin_clients: dict[str, ClusterClient]) -> dict[str, Any]:
    """The sample torch runtime on every cluster, its pods running under kwok until a test
    ends them (`end_pods`) or a job's own `kwok_patch` times them; a failed pod fails its
    Job at once (no pod retries), so a failure reaches the TrainJob without delay."""
    runtime = kwok_timed(yaml.safe_load(
        (SAMPLES / "clustertrainingruntime-torch.yaml").read_text()), run_seconds=None)
    for replicated in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        replicated["template"]["spec"]["backoffLimit"] = 0
    for client in admin_clients.values():
        await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(runtime, field_manager="tests")
    return runtime


@pytest.fixture(scope="session")
def worker_kubeconfigs(control_plane: LocalControlPlane) -> dict[str, str]:
    return {name: str(cluster.kubeconfig_path) for name, cluster in control_plane.clusters.items()}


def base_config(control_plane: LocalControlPlane, namespace: str) -> dict[str, Any]:
    return {
        "namespace": f"{namespace}-system",
        "claim": {"namespaces": [namespace]},
        "mirror": {"origin": namespace, "requeueBackoffSeconds": 0.2,
                   "retainFinishedSeconds": 0},  # as before retention; its tests set it
        "workers": {
            "fromCRD": False,
            "static": [
                {"name": name, "kubeconfig": str(control_plane.clusters[name].kubeconfig_path),
                 "quota": DEFAULT_QUOTA}
                for name in ("worker-a", "worker-b") if name in control_plane.clusters
            ],
            "probeIntervalSeconds": 0.5,
            "lostTimeoutSeconds": 30,
        },
        "gc": {"intervalSeconds": 1},
        "server": {"host": "127.0.0.1", "port": 0, "statusPort": 0, "logsPort": 0},
        "client": {"timeoutSeconds": 3},
    }


class DispatcherRunner:
    """Starts in-process dispatchers for one test's namespace and stops them all."""

    def __init__(self, control_plane: LocalControlPlane, namespace: str) -> None:
        self._plane = control_plane
        self.namespace = namespace
        self.tasks: dict[Dispatcher, asyncio.Task[None]] = {}

    async def __call__(self, wait_for_workers: bool = True,
                       manager_kubeconfig: dict[str, Any] | None = None,
                       **overrides: Any) -> Dispatcher:
        config = DispatcherConfig.model_validate(
            deep_merge(base_config(self._plane, self.namespace), overrides))
        kubeconfig = manager_kubeconfig or self._plane.clusters["manager"].kubeconfig()
        await _dispatcher_namespace(kubeconfig, config.namespace)
        dispatcher = Dispatcher(config, manager_kubeconfig=kubeconfig,
                                instance=f"test-{len(self.tasks)}")
        task = asyncio.create_task(dispatcher.run(), name=f"dispatcher-{len(self.tasks)}")
        self.tasks[dispatcher] = task
        ready = asyncio.create_task(dispatcher.ready.wait())
        if not wait_for_workers and config.leader_election.enabled:
            await eventually(lambda: _serving(dispatcher), timeout=30)
            return dispatcher
        done, _ = await asyncio.wait({ready, task}, timeout=30,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            ready.cancel()
            task.result()
        assert ready in done, "dispatcher did not become ready"
        if wait_for_workers:
            await eventually(lambda: _all_workers_open(dispatcher), timeout=20)
        return dispatcher

    async def stop(self, *dispatchers: Dispatcher) -> None:
        tasks = [self.tasks.pop(d) for d in dispatchers or list(self.tasks)]
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        done, stuck = await asyncio.wait(tasks, timeout=15)
        if stuck:
            for other in asyncio.all_tasks():
                other.print_stack(limit=8)
        assert not stuck, "a dispatcher did not stop within 15s of being cancelled"
        for task in done:
            with contextlib.suppress(asyncio.CancelledError):
                task.result()


StartDispatcher = DispatcherRunner


@pytest_asyncio.fixture
async def start_dispatcher(
    control_plane: LocalControlPlane, namespace: str, runtime_installed: dict[str, Any]
) -> AsyncIterator[DispatcherRunner]:
    """Start dispatchers for this test's namespace; all are stopped at the end."""
    runner = DispatcherRunner(control_plane, namespace)
    yield runner
    await runner.stop()


async def _dispatcher_namespace(kubeconfig: dict[str, Any], name: str) -> None:
    """The dispatcher's namespace (its Placement records live there), as deploy/ makes
    it; a kubeconfig that may not create namespaces finds it made already."""
    client = await ClusterClient.from_kubeconfig(name="namespace", kubeconfig=kubeconfig,
                                                 settings=ClientSettings(timeout_seconds=10))
    try:
        await ensure_namespace(client, name)
    except ApiException as error:
        if error.status != 403:
            raise
    finally:
        await client.close()


async def _serving(dispatcher: Dispatcher) -> bool:
    return dispatcher.server is not None and dispatcher.server.port != 0


async def _all_workers_open(dispatcher: Dispatcher) -> bool:
    assert dispatcher.registry is not None
    return all(w.usable() and w.collected for w in dispatcher.registry.workers.values())


async def eventually(check: Callable[[], Awaitable[Any]], *, timeout: float = 10.0,
                     interval: float = 0.05) -> Any:
    """Poll `check` until it returns a truthy value; fail with its last value."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")
        await asyncio.sleep(interval)


def counted(dispatcher: Dispatcher, metric: str) -> float:
    """The sum of a counter of `dispatcher`'s own metrics over all its labels."""
    return sum(sample.value for family in dispatcher.metrics.registry.collect()
               for sample in family.samples if sample.name == metric)


async def a_pass_after(dispatcher: Dispatcher) -> None:
    """Ask for a scheduling pass and wait until one that began after this call ended: what
    the queue shows then is what the dispatcher made of everything done before (a pass
    runs only while some job is pending)."""
    before = counted(dispatcher, "dispatcher_scheduling_passes_total")
    assert dispatcher.jobs is not None
    dispatcher.jobs.scheduling.trigger()

    async def passed() -> bool:
        return counted(dispatcher, "dispatcher_scheduling_passes_total") > before
    await eventually(passed)


async def reconciled(dispatcher: Dispatcher, times: int) -> None:
    """Wait until `dispatcher` has reconciled its jobs `times` times in all (of any key:
    to wait for particular jobs, `looked_at`)."""
    async def enough() -> bool:
        return counted(dispatcher, "dispatcher_reconciles_total") >= times
    await eventually(enough, timeout=20)


async def settled(dispatcher: Dispatcher, *, timeout: float = 20.0) -> None:
    """Wait for a scheduling pass that began after this call, then for the dispatcher to
    carry it out: no reservation left to record and no key ready or being reconciled. A
    pass only reserves; the record and the mirror are written after it, by the
    reconciles it enqueued. What the manager and the workers show then is what the
    dispatcher made of everything done before the call."""
    await a_pass_after(dispatcher)
    jobs = dispatcher.jobs
    assert jobs is not None

    async def quiet() -> bool:
        return not jobs.scheduling.reservations and jobs.queue.idle()
    await eventually(quiet, timeout=timeout)


async def looked_at(dispatcher: Dispatcher, uids: Iterable[str], *,
                    timeout: float = 20.0) -> None:
    """Wait until `dispatcher` has reconciled each of these jobs (a reconcile records the
    demand its snapshot computed in the job's memory) and acted on them (no key ready or
    being reconciled)."""
    jobs = dispatcher.jobs
    assert jobs is not None
    wanted = set(uids)

    async def seen() -> bool:
        missing = {uid for uid in wanted
                   if (memory := jobs.memories.get(uid)) is None or memory.demand is None}
        return not missing and jobs.queue.idle()
    await eventually(seen, timeout=timeout)


async def complete_mirror(admin_clients: dict[str, ClusterClient], worker: str, name: str,
                          namespace: str) -> None:
    """End the mirror's pods on `worker` once they run (kwok plays their kubelet); the
    worker's Job, JobSet and Trainer controllers then mark it Complete."""
    await eventually(lambda: end_pods(admin_clients[worker], namespace, name), timeout=30)


_VAP = ResourceKind("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
                    namespaced=False)
_VAP_BINDING = ResourceKind("admissionregistration.k8s.io", "v1",
                            "validatingadmissionpolicybindings", namespaced=False)


@contextlib.asynccontextmanager
async def trainjobs_refused(client: ClusterClient, namespace: str, operation: str,
                            message: str) -> AsyncIterator[None]:
    """While inside, `client`'s cluster refuses `operation` (CREATE or DELETE) on the
    TrainJobs of `namespace`, as an admission webhook would: a real
    ValidatingAdmissionPolicy, in force (probed) before the body runs and lifted (probed)
    after it."""
    policy = f"refuse-{operation.lower()}-{namespace}"
    subject = "oldObject" if operation == "DELETE" else "object"
    policies, bindings = Resource(client, _VAP), Resource(client, _VAP_BINDING)
    await policies.create({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["*"],
                "operations": [operation], "resources": ["trainjobs"]}]},
            "validations": [{"expression": f"{subject}.metadata.namespace != '{namespace}'",
                             "message": message}],
        },
    })
    await bindings.create({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    })
    jobs = Resource(client, TRAINJOBS)
    probe = f"probe-{operation.lower()}"

    async def in_force() -> bool:
        try:
            await jobs.create(trainjob(probe, namespace), namespace=namespace)
        except ApiException:
            if operation == "CREATE":
                return True
            raise
        try:
            await jobs.delete(probe, namespace=namespace)
        except ApiException:
            if operation == "DELETE":
                return True
            raise
        return False
    try:
        await eventually(in_force, timeout=10, interval=0.2)
        yield
    finally:
        await bindings.delete(policy)
        await policies.delete(policy)
        async def lifted() -> bool:
            """The operation goes through again (the API server drops a deleted policy a
            moment later): a probe created, then deleted."""
            if operation == "CREATE":
                with contextlib.suppress(ApiException):
                    await jobs.create(trainjob(probe, namespace), namespace=namespace)
                if await jobs.get(probe, namespace=namespace) is None:
                    return False
            with contextlib.suppress(ApiException):
                await jobs.delete(probe, namespace=namespace)
            return await jobs.get(probe, namespace=namespace) is None
        await eventually(lifted, timeout=10, interval=0.2)


@contextlib.asynccontextmanager
async def watching(client: ClusterClient, namespace: str,
                   handler: Callable[[str, dict[str, Any]], None]) -> AsyncIterator[None]:
    """`handler` gets every change of the namespace's TrainJobs on `client`'s cluster,
    from a synced watch, for the length of the block."""
    informer = Informer(Resource(client, TRAINJOBS), namespace=namespace)
    informer.add_handler(handler)
    task = asyncio.create_task(informer.run(), name=f"test/watch/{client.name}/{namespace}")
    try:
        await asyncio.wait_for(informer.synced.wait(), timeout=10)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


PLANE_CLIENT = ClientSettings(qps=1000, burst=1000, timeout_seconds=10)
"""The tests' admin clients of a plane of their own."""


async def connect_all(plane: LocalControlPlane, settings: ClientSettings = PLANE_CLIENT
                      ) -> dict[str, ClusterClient]:
    """An admin client per cluster of `plane`."""
    return {name: await ClusterClient.from_kubeconfig(
        name=name, kubeconfig=cluster.kubeconfig(), settings=settings)
        for name, cluster in plane.clusters.items()}


async def install_timed_runtime(clients: dict[str, ClusterClient], run_seconds: float) -> None:
    """The sample torch runtime on every cluster, its pods running `run_seconds` under kwok."""
    runtime = kwok_timed(yaml.safe_load(
        (SAMPLES / "clustertrainingruntime-torch.yaml").read_text()), run_seconds=run_seconds)
    for client in clients.values():
        await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(runtime, field_manager="tests")


async def fresh_namespace(clients: dict[str, ClusterClient], prefix: str) -> str:
    """A new namespace of a random name starting with `prefix`, on every cluster."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    for client in clients.values():
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


async def shut_down(plane: LocalControlPlane, clients: dict[str, ClusterClient]) -> None:
    """Close the clients, stop every cluster's Trainer chain, then the plane."""
    for client in clients.values():
        await client.close()
    for cluster in plane.clusters.values():
        await cluster.stop_trainer()
    plane.stop()
