"""Fresh clusters for one system of the peer benchmark, set up as its users would.

`System` says what runs: the dispatcher (its workers with or without Kueue: the fair
mode sends its mirrors through each worker's Kueue via `localQueue`; with
`manager_kueue`, Kueue on the manager too, the dispatcher being the AdmissionCheck of its
ClusterQueue where MultiKueue's would be: the symmetric setting) or MultiKueue (Kueue
on the manager with a MultiKueue AdmissionCheck, Kueue on every worker) with given Kueue
settings. `environment(system, workers=K)` starts a new local control plane (a manager
and K workers, each with the garbage collector), installs the runtime and the `bench`
namespace, the queues (one ClusterQueue with room for every job, the same names on every
cluster; or `quota` per worker, the manager's MultiKueue queue getting their sum) and
warms each API server up, and yields an `Environment` with admin clients; everything is
stopped when the block ends. `lost_timeout_seconds` is given to both systems (the
dispatcher's `workers.lostTimeoutSeconds`, MultiKueue's `workerLostTimeout`).
`preemption=PreemptionSetup(...)` (the preemption scenario's) also creates
WorkloadPriorityClasses on every cluster, gives every ClusterQueue a `preemption` policy
and turns Kueue feature gates on in every Kueue started. Starting the system's
controllers is the caller's (bench/peer/systems.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import yaml

from bench.harness import SAMPLE_RUNTIME
from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.kueue import KueueSettings, MultiKueueSettings
from devkit.localcluster.kueue_objects import (
    ADMISSION_CHECKS,
    API_VERSION,
    FIELD_MANAGER,
    WORKLOAD_PRIORITY_CLASSES,
    setup_multikueue,
    setup_queues,
    workload_priority_class,
)
from devkit.localcluster.trainer import NodePool, chain_crd_files, kwok_timed
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, TRAINJOBS
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.resource import NAMESPACES, Resource
from dispatcher.placement.quantity import parse_quantity

NAMESPACE = "bench"
QUEUE = "bench"
CHECK = "bench-multikueue"
"""The manager's AdmissionCheck: MultiKueue's, or (same name) the dispatcher's."""
CHECK_CONTROLLER = "dispatcher.trainjob.io/multicluster"
QUOTA = {"cpu": "1000000", "memory": "100000Ti"}
"""Room for every job: the benchmark measures placement, not queueing for quota."""
HARNESS_CLIENT = ClientSettings(qps=5000, burst=5000, timeout_seconds=30, pool_size=32)
DEFAULT_LOST_TIMEOUT_SECONDS = 900.0
NODE_CPU = 4
"""CPU of one kwok node, with the real chain."""
"""Both systems' default: the dispatcher's lostTimeoutSeconds, MultiKueue's 15m."""

KUEUE_DEFAULTS = KueueSettings()
KUEUE_SHIPPED = KueueSettings(qps=50, burst=100, concurrency={"Workload.kueue.x-k8s.io": 5})
"""What Kueue's shipped manifests configure (config/components/manager/
controller_manager_config.yaml in v0.17.0): what a user who installs it gets."""
KUEUE_QPS = KueueSettings(qps=500, burst=1000)
"""Kueue's own performance setup raises clientConnection to 500/1000."""
KUEUE_TUNED = KueueSettings(
    qps=500, burst=1000,
    concurrency={"Workload.kueue.x-k8s.io": 20, "TrainJob.trainer.kubeflow.org": 20})
"""The same, and the Workload and TrainJob reconcilers get 20 workers instead of
controller-runtime's default of one each."""


@dataclass(frozen=True)
class System:
    """One system under test and every setting it runs with."""

    name: str
    kind: str  # "dispatcher" or "multikueue"
    worker_kueue: KueueSettings | None = None
    manager_kueue: KueueSettings | None = None
    multikueue: MultiKueueSettings = field(default_factory=MultiKueueSettings)
    dispatcher: dict[str, Any] = field(default_factory=dict)
    """Dispatcher settings beside its defaults (merged into its config file)."""

    @property
    def when_lost(self) -> str:
        """What happens to a lost worker's jobs: MultiKueue always requeues them."""
        return str(self.dispatcher.get("workers", {}).get("whenLost", "Requeue"))

    @property
    def preempts(self) -> bool:
        """Whether it may stop running jobs for one of higher priority: MultiKueue's
        worker Kueues do where their ClusterQueues allow it; the dispatcher with
        `placement.preemption.policy: LowerPriority` (its own choice across workers)."""
        if self.kind == "multikueue":
            return True
        placement = self.dispatcher.get("placement", {})
        return bool(placement.get("preemption", {}).get("policy") == "LowerPriority")

    def describe(self) -> dict[str, Any]:
        def kueue(settings: KueueSettings | None) -> Any:
            if settings is None:
                return None
            return {"qps": settings.qps, "burst": settings.burst,
                    "concurrency": settings.concurrency or "Kueue's defaults"}
        described: dict[str, Any] = {"kind": self.kind, "worker_kueue": kueue(self.worker_kueue)}
        if self.kind == "dispatcher":
            described["dispatcher"] = self.dispatcher or "defaults (client QPS raised)"
        if self.manager_kueue is not None:
            described["manager_kueue"] = kueue(self.manager_kueue)
        if self.kind == "multikueue":
            described["multikueue_dispatcher"] = self.multikueue.dispatcher_name
            described["multikueue_remote_client"] = (
                "client-go's 5 QPS / 10 burst" if self.multikueue.remote_qps is None else
                f"{self.multikueue.remote_qps:g} QPS / {self.multikueue.remote_burst} burst "
                "(rebuilt kueue-remote-qps)")
        return described


@dataclass(frozen=True)
class PreemptionSetup:
    """What a run needs for jobs of different priorities to preempt (nothing by default)."""

    priority_classes: dict[str, int] = field(default_factory=dict)
    """WorkloadPriorityClasses (name -> value) created on every cluster: the manager's
    give the jobs their priority (to the dispatcher and to MultiKueue's manager), the
    workers' to their Kueue (which the dispatcher also checks before placing a job
    naming one)."""
    cluster_queue_preemption: dict[str, Any] | None = None
    """The `spec.preemption` of every ClusterQueue set up, e.g.
    `{"withinClusterQueue": "LowerPriority"}`."""
    kueue_feature_gates: tuple[str, ...] = ()
    """Added to every Kueue the run starts (manager and workers)."""


@dataclass
class Environment:
    plane: LocalControlPlane
    clients: dict[str, ClusterClient]
    workers: list[str]
    system: System
    quota: dict[str, str] = field(default_factory=lambda: dict(QUOTA))
    """Each worker's ClusterQueue (and the dispatcher's declared quota per worker)."""
    manager_quota: dict[str, str] = field(default_factory=lambda: dict(QUOTA))
    """MultiKueue's ClusterQueue on the manager."""
    lost_timeout_seconds: float = DEFAULT_LOST_TIMEOUT_SECONDS
    real_chain: bool = False
    """The real Trainer and JobSet on every cluster, kwok nodes holding each worker's
    quota (rather than the simulated trainer)."""
    dispatcher_port: int | None = None
    """Where the dispatcher serves /metrics, once bench/peer/systems.py runs it."""
    preemption: PreemptionSetup = field(default_factory=PreemptionSetup)
    """Priority classes, ClusterQueue preemption and Kueue feature gates of this run."""


async def _prepare_cluster(client: ClusterClient, runtime: dict[str, Any]) -> None:
    await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(runtime, field_manager="bench")
    await Resource(client, NAMESPACES).create({"metadata": {"name": NAMESPACE}})
    # An API server sets up serving a custom resource on its first request to it.
    jobs = Resource(client, TRAINJOBS)
    await jobs.create(trainjob("warm-up", NAMESPACE), namespace=NAMESPACE)
    await jobs.delete("warm-up", namespace=NAMESPACE)


async def _start_kueue(env: Environment) -> None:
    system = env.system
    gates = env.preemption.kueue_feature_gates

    def gated(settings: KueueSettings) -> KueueSettings:
        return dataclasses.replace(settings, feature_gates=(*settings.feature_gates, *gates))
    starts = []
    if system.worker_kueue is not None:
        starts += [env.plane.clusters[w].start_kueue(gated(system.worker_kueue))
                   for w in env.workers]
    if system.kind == "dispatcher" and system.manager_kueue is not None:
        starts.append(env.plane.clusters["manager"].start_kueue(gated(system.manager_kueue)))
    if system.kind == "multikueue":
        manager = system.manager_kueue or KUEUE_DEFAULTS
        multikueue = system.multikueue
        if env.lost_timeout_seconds != DEFAULT_LOST_TIMEOUT_SECONDS:
            multikueue = dataclasses.replace(
                multikueue, worker_lost_timeout=f"{env.lost_timeout_seconds:g}s")
        settings = KueueSettings(qps=manager.qps, burst=manager.burst,
                                 concurrency=manager.concurrency, multikueue=multikueue)
        starts.append(env.plane.clusters["manager"].start_kueue(gated(settings)))
    await asyncio.gather(*starts)


async def _priority_classes(env: Environment) -> None:
    for client in env.clients.values():
        classes = Resource(client, WORKLOAD_PRIORITY_CLASSES)
        for name, value in env.preemption.priority_classes.items():
            await classes.apply(workload_priority_class(name, value),
                                field_manager=FIELD_MANAGER)


async def _setup_queues(env: Environment) -> None:
    preemption = env.preemption.cluster_queue_preemption
    if env.system.worker_kueue is not None:
        for worker in env.workers:
            await setup_queues(env.clients[worker], cluster_queue_name=QUEUE,
                               local_queue_name=QUEUE, namespaces=[NAMESPACE], quota=env.quota,
                               preemption=preemption)
    if env.system.kind == "dispatcher" and env.system.manager_kueue is not None:
        await Resource(env.clients["manager"], ADMISSION_CHECKS).apply({
            "apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
            "spec": {"controllerName": CHECK_CONTROLLER}}, field_manager=FIELD_MANAGER)
        await setup_queues(env.clients["manager"], cluster_queue_name=QUEUE,
                           local_queue_name=QUEUE, namespaces=[NAMESPACE],
                           quota=env.manager_quota, admission_check=CHECK,
                           preemption=preemption)
    if env.system.kind == "multikueue":
        await setup_multikueue(
            env.clients["manager"], config_name=CHECK, check_name=CHECK,
            workers={w: env.plane.clusters[w].kubeconfig() for w in env.workers})
        await setup_queues(env.clients["manager"], cluster_queue_name=QUEUE,
                           local_queue_name=QUEUE, namespaces=[NAMESPACE],
                           quota=env.manager_quota, admission_check=CHECK,
                           preemption=preemption)


def _nodes(quota: dict[str, str]) -> NodePool:
    """kwok nodes of 4 CPU (and 16Gi) that hold together the worker's CPU quota."""
    cpus = int(parse_quantity(quota["cpu"]))
    return NodePool(count=max(1, -(-cpus // NODE_CPU)), allocatable={
        "cpu": str(NODE_CPU), "memory": f"{4 * NODE_CPU}Gi", "pods": "110"})


@asynccontextmanager
async def environment(system: System, *, workers: int, quota: dict[str, str] | None = None,
                      manager_quota: dict[str, str] | None = None,
                      lost_timeout_seconds: float = DEFAULT_LOST_TIMEOUT_SECONDS,
                      real_chain: bool = False, run_seconds: float = 10.0,
                      preemption: PreemptionSetup | None = None,
                      ) -> AsyncIterator[Environment]:
    """Fresh clusters with the system's Kueues and queues; with `real_chain`, the real
    Trainer chain on every cluster, its pods running `run_seconds` under kwok; with
    `preemption`, its priority classes, queue policy and Kueue feature gates."""
    names = [f"worker-{i}" for i in range(workers)]
    clusters = ["manager", *names]
    async with LocalControlPlane() as plane:
        await plane.start(clusters, controllers=clusters,
                          crd_files=chain_crd_files(kueue=True) if real_chain else None)
        if real_chain:
            nodes = _nodes(dict(quota or QUOTA))
            await asyncio.gather(*(plane.clusters[n].start_trainer(nodes if n in names else None)
                                   for n in clusters))
        clients = {n: await ClusterClient.from_kubeconfig(
            name=n, kubeconfig=plane.clusters[n].kubeconfig(), settings=HARNESS_CLIENT)
            for n in clusters}
        env = Environment(plane=plane, clients=clients, workers=names, system=system,
                          quota=dict(quota or QUOTA),
                          manager_quota=dict(manager_quota or quota or QUOTA),
                          lost_timeout_seconds=lost_timeout_seconds, real_chain=real_chain,
                          preemption=preemption or PreemptionSetup())
        try:
            runtime = yaml.safe_load(
                SAMPLE_RUNTIME.read_text())
            if real_chain:
                runtime = kwok_timed(runtime, run_seconds=run_seconds)
            await asyncio.gather(*(_prepare_cluster(c, runtime) for c in clients.values()))
            await _start_kueue(env)
            await _priority_classes(env)
            await _setup_queues(env)
            yield env
        finally:  # the plane then stops every Kueue, then the API servers
            for client in clients.values():
                await client.close()
