"""TrainJobs run by the real Kubeflow Trainer chain, not by a stand-in.

A control plane of its own (a manager and two workers) serves the Trainer's and JobSet's
CRDs as their modules ship them, and runs the real Trainer v2.3.0 and JobSet v0.12.0
controllers with their webhooks on every cluster; each worker also runs kube-scheduler
and kwok with two fake nodes, and its quota is what those nodes hold; worker-b also runs
a real Kueue. The dispatcher
places the job, the worker's Trainer makes its JobSet, JobSet its Jobs, the Job
controller its pods, the scheduler binds them to kwok nodes and kwok runs them; what the
manager shows is what the worker's Trainer wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.kueue_objects import LOCAL_QUEUES, setup_queues
from devkit.localcluster.trainer import (
    JOBSETS,
    POD_FAILS_LABEL,
    NodePool,
    chain_crd_files,
)
from dispatcher.admin import register_worker
from dispatcher.api import constants as c
from dispatcher.api.kueue import WORKLOAD_PRIORITY_CLASSES, WORKLOADS
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.api.workercluster import WORKER_CLUSTERS
from dispatcher.app import Dispatcher
from dispatcher.claim import Claim
from dispatcher.config import ClaimConfig
from dispatcher.controllers.jobs.controller import JobsController
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource, ResourceKind
from dispatcher.observability.jobstate import STATE_PLACED, job_state
from tests.conftest import KUEUE_SERVED
from tests.integration.conftest import (
    SAMPLES,
    DispatcherRunner,
    connect_all,
    eventually,
    fresh_namespace,
    shut_down,
)
from tests.integration.test_forgery import events_of

pytestmark = pytest.mark.integration
CLUSTERS = ("manager", "worker-a", "worker-b")
WORKERS = CLUSTERS[1:]
KUEUE_WORKER = "worker-b"
"""Runs a real Kueue beside its Trainer; only mirrors labelled for one of its LocalQueues
are its to admit (the other tests' are not)."""
NODES = NodePool(count=2, allocatable={"cpu": "4", "memory": "16Gi", "pods": "110"})
PODS = ResourceKind("", "v1", "pods", namespaced=True)
QUICK = {f"{stage}.stage.kwok.x-k8s.io/{knob}": delay
         for stage, delay in (("pod-create", "0s"), ("pod-ready", "0s"), ("pod-complete", "1s"))
         for knob in ("delay", "jitter-delay")}
"""kwok pod stages without their random delays (kwok waits between `delay` and
`jitter-delay`): created, running, done a second later."""


def runtime(name: str, *, fails: bool = False) -> dict[str, Any]:
    """The sample torch runtime, its pods quick under kwok (and failing with `fails`)."""
    body: dict[str, Any] = copy.deepcopy(yaml.safe_load(
        (SAMPLES / "clustertrainingruntime-torch.yaml").read_text()))
    body["metadata"]["name"] = name
    job = body["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
    job["spec"]["backoffLimit"] = 0
    pod = job["spec"]["template"]
    metadata = pod.setdefault("metadata", {})
    metadata["annotations"] = dict(QUICK)
    if fails:
        metadata["labels"] = {POD_FAILS_LABEL: "true"}
        metadata["annotations"].update({
            "pod-complete.stage.kwok.x-k8s.io/weight": "0",
            "pod-container-running-failed.stage.kwok.x-k8s.io/delay": "1s",
            "pod-container-running-failed.stage.kwok.x-k8s.io/jitter-delay": "1s"})
    return body


class Chain:
    def __init__(self, plane: LocalControlPlane, clients: dict[str, ClusterClient]) -> None:
        self.plane = plane
        self.clients = clients

    @contextlib.asynccontextmanager
    async def runtime(self, body: dict[str, Any], *, on: tuple[str, ...] = CLUSTERS
                      ) -> AsyncIterator[str]:
        """`body` (a ClusterTrainingRuntime) on the clusters `on` while inside."""
        name = body["metadata"]["name"]
        for cluster in on:
            await Resource(self.clients[cluster], CLUSTER_TRAINING_RUNTIMES).apply(
                body, field_manager="tests")
        try:
            yield name
        finally:
            for cluster in on:
                await Resource(self.clients[cluster], CLUSTER_TRAINING_RUNTIMES).delete(name)


@pytest_asyncio.fixture(scope="module")
async def chain() -> AsyncIterator[Chain]:
    plane = LocalControlPlane()
    clients: dict[str, ClusterClient] = {}
    try:
        await plane.start(CLUSTERS, controllers=CLUSTERS, crd_files=chain_crd_files(
            kueue=True, kueue_served=KUEUE_SERVED))
        for name in CLUSTERS:
            await plane.clusters[name].start_trainer(NODES if name in WORKERS else None)
        clients = await connect_all(plane)
        for client in clients.values():
            for body in (runtime("torch-quick"), runtime("torch-failing", fails=True)):
                await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(
                    body, field_manager="tests")
        await plane.clusters[KUEUE_WORKER].start_kueue()
        yield Chain(plane, clients)
    finally:
        await shut_down(plane, clients)


@pytest_asyncio.fixture
async def chain_namespace(chain: Chain) -> str:
    return await fresh_namespace(chain.clients, "r")


@pytest_asyncio.fixture
async def dispatchers(chain: Chain, chain_namespace: str) -> AsyncIterator[DispatcherRunner]:
    runner = DispatcherRunner(chain.plane, chain_namespace)
    yield runner
    await runner.stop()


async def start(dispatchers: DispatcherRunner, chain: Chain, *,
                keep_finished: bool = False) -> Dispatcher:
    return await dispatchers(
        mirror={"origin": dispatchers.namespace, "keepFinished": keep_finished},
        workers={"static": [
            {"name": w, "kubeconfig": str(chain.plane.clusters[w].kubeconfig_path),
             "quota": NODES.total()} for w in WORKERS]})


def condition(job: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return {}


async def finished(jobs: Resource, name: str, namespace: str) -> dict[str, Any] | None:
    job = await jobs.get(name, namespace=namespace)
    for type_ in ("Complete", "Failed"):
        if condition(job, type_).get("status") == "True":
            return job
    return None


async def test_a_trainjob_runs_on_the_real_chain_and_completes_on_the_manager(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    namespace = chain_namespace
    await start(dispatchers, chain, keep_finished=True)  # its pods stay to be looked at
    jobs = Resource(chain.clients["manager"], TRAINJOBS)
    await jobs.create(trainjob("real", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                               runtime="torch-quick", num_nodes=2), namespace=namespace)
    job = await eventually(lambda: finished(jobs, "real", namespace), timeout=60)
    complete = condition(job, "Complete")
    assert (complete["status"], complete["reason"]) == ("True", "AllJobsCompleted")
    worker = job["metadata"]["annotations"][c.ANNOTATION_CLUSTER]
    mirror = await Resource(chain.clients[worker], TRAINJOBS).get("real", namespace=namespace)
    assert mirror is not None
    assert mirror["status"]["jobsStatus"] == job["status"]["jobsStatus"]
    assert condition(mirror, "Complete") == complete
    assert job["status"]["jobsStatus"] == [{"name": "node", "active": 0, "ready": 0,
                                            "succeeded": 1, "failed": 0, "suspended": 0}]
    # The worker's scheduler placed the pods on its kwok nodes.
    pods = (await Resource(chain.clients[worker], PODS).list(namespace=namespace))["items"]
    assert len(pods) == 2
    assert {p["spec"]["nodeName"] for p in pods} <= {f"{worker}-node-{i}" for i in range(2)}
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)
    # The manager's own Trainer left the claimed job alone.
    assert not (await Resource(chain.clients["manager"], JOBSETS).list(
        namespace=namespace))["items"]
    assert not (await Resource(chain.clients["manager"], PODS).list(
        namespace=namespace))["items"]


async def test_a_failing_pod_fails_the_job_on_the_manager_and_it_is_not_rerun(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    namespace = chain_namespace
    await start(dispatchers, chain)
    jobs = Resource(chain.clients["manager"], TRAINJOBS)
    await jobs.create(trainjob("doomed", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                               runtime="torch-failing"), namespace=namespace)
    job = await eventually(lambda: finished(jobs, "doomed", namespace), timeout=60)
    failed = condition(job, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "FailedJobs", failed
    assert c.ANNOTATION_EVICTIONS not in (job["metadata"].get("annotations") or {})
    assert condition(job, c.CONDITION_DISPATCHED)["reason"] == c.REASON_FINISHED


def sized(body: dict[str, Any], *, cpu: str, runs_for: str = "1s") -> dict[str, Any]:
    """`body` with its pods asking for `cpu` each, done `runs_for` after they run."""
    body = copy.deepcopy(body)
    pod = body["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    for knob in ("delay", "jitter-delay"):
        pod["metadata"]["annotations"][f"pod-complete.stage.kwok.x-k8s.io/{knob}"] = runs_for
    return body


async def test_the_workers_own_runtime_decides_where_a_job_may_go_and_what_it_books(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    namespace = chain_namespace
    clients = chain.clients
    only_b, nowhere, bigger = (f"{namespace}-{n}" for n in ("only-b", "nowhere", "bigger"))
    applied: list[tuple[str, str]] = []

    async def apply(cluster: str, body: dict[str, Any]) -> None:
        await Resource(clients[cluster], CLUSTER_TRAINING_RUNTIMES).apply(
            body, field_manager="tests")
        applied.append((cluster, body["metadata"]["name"]))

    for cluster in ("manager", "worker-b"):
        await apply(cluster, runtime(only_b))
    await apply("manager", runtime(nowhere))
    await apply("manager", sized(runtime(bigger), cpu="1", runs_for="60s"))
    await apply("worker-a", sized(runtime(bigger), cpu="3", runs_for="60s"))
    await start(dispatchers, chain)
    jobs = Resource(clients["manager"], TRAINJOBS)
    try:
        # A runtime only one worker has: the job goes there.
        await jobs.create(trainjob("on-b", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                   runtime=only_b), namespace=namespace)
        job = await eventually(lambda: finished(jobs, "on-b", namespace), timeout=60)
        assert job["metadata"]["annotations"][c.ANNOTATION_CLUSTER] == "worker-b"
        assert condition(job, "Complete")["status"] == "True"

        # A runtime no worker has: the job waits, saying which workers lack which runtime,
        # and nothing is created anywhere (no refused create on a worker).
        await jobs.create(trainjob("nowhere", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                   runtime=nowhere), namespace=namespace)

        async def waiting() -> dict[str, Any]:
            return condition(await jobs.get("nowhere", namespace=namespace),
                             c.CONDITION_DISPATCHED)
        dispatched = await eventually(
            lambda: _with_reason(waiting, c.REASON_RUNTIME_NOT_FOUND), timeout=20)
        for worker in WORKERS:
            assert f"{worker} has no ClusterTrainingRuntime {nowhere!r}" in dispatched["message"]
            assert await Resource(clients[worker], TRAINJOBS).get(
                "nowhere", namespace=namespace) is None
        # The runtime arrives on worker-a: the job goes there at once.
        await apply("worker-a", runtime(nowhere))
        job = await eventually(lambda: finished(jobs, "nowhere", namespace), timeout=60)
        assert job["metadata"]["annotations"][c.ANNOTATION_CLUSTER] == "worker-a"

        # The worker's copy of a runtime asks for more than the manager's: the quota
        # booked is what the worker will run (2 nodes x 3 CPU, not 2 x 1).
        await jobs.create(trainjob("bigger", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                   runtime=bigger, num_nodes=2), namespace=namespace)

        async def booked() -> str | None:
            job = await jobs.get("bigger", namespace=namespace) or {"metadata": {}}
            return (job["metadata"].get("annotations") or {}).get(c.ANNOTATION_DEMAND)
        demand = await eventually(booked, timeout=20)
        assert "cpu=6" in demand.split(","), demand

        async def running_pods() -> list[dict[str, Any]]:
            pods = (await Resource(clients["worker-a"], PODS).list(
                namespace=namespace))["items"]
            return [p for p in pods if p["metadata"]["name"].startswith("bigger-")
                    and p["status"].get("phase") == "Running"]
        async def both_running() -> list[dict[str, Any]]:
            pods = await running_pods()
            return pods if len(pods) == 2 else []
        pods = await eventually(both_running, timeout=45)
        assert {p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in pods} == {
            "3"}
        assert len({p["spec"]["nodeName"] for p in pods}) == 2, "3 CPU each: one per node"
    finally:
        for cluster, name in applied:
            await Resource(clients[cluster], CLUSTER_TRAINING_RUNTIMES).delete(name)


async def _with_reason(read: Any, reason: str) -> dict[str, Any] | None:
    found: dict[str, Any] = await read()
    return found if found.get("reason") == reason else None


async def test_the_samples_are_accepted_by_the_real_manager_which_runs_only_its_own(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    """What `kubectl apply -f config/samples/` submits passes the real Trainer's webhooks
    on the manager; the manager's Trainer runs the job it owns and none of the claimed
    ones; with the samples' runtime on no worker, the jobs and the WorkerClusters say so."""
    namespace = chain_namespace
    manager = chain.clients["manager"]
    system = f"{namespace}-system"
    sample_runtime = yaml.safe_load(
        (SAMPLES / "clustertrainingruntime-torch.yaml").read_text())
    await Resource(manager, CLUSTER_TRAINING_RUNTIMES).apply(sample_runtime,
                                                             field_manager="tests")
    names = {w: f"{namespace}-{w}" for w in WORKERS}
    quota = {k: v for k, v in NODES.total().items() if k != "pods"}
    for worker, name in names.items():
        await register_worker(manager, namespace=system, name=name,
                              kubeconfig=chain.plane.clusters[worker].kubeconfig(), quota=quota)
    try:
        await dispatchers(workers={"fromCRD": True, "static": []})
        samples = [d for d in yaml.safe_load_all((SAMPLES / "trainjobs.yaml").read_text()) if d]
        for sample in samples:
            sample["metadata"]["namespace"] = namespace
            await Resource(manager, TRAINJOBS).apply(sample, field_manager="kubectl")
        claimed = [s["metadata"]["name"] for s in samples
                   if s["spec"].get("managedBy") == MANAGED_BY_MULTIKUEUE]
        jobs = Resource(manager, TRAINJOBS)

        async def all_waiting_for_the_runtime() -> bool:
            for name in claimed:
                dispatched = condition(await jobs.get(name, namespace=namespace),
                                       c.CONDITION_DISPATCHED)
                if dispatched.get("reason") != c.REASON_RUNTIME_NOT_FOUND:
                    return False
            return True
        await eventually(all_waiting_for_the_runtime, timeout=30)

        async def shown_on_the_workers() -> bool:
            for name in names.values():
                status = (await Resource(manager, WORKER_CLUSTERS).get(name) or {}).get(
                    "status") or {}
                if status.get("missingRuntimes") != [
                        f"has no ClusterTrainingRuntime 'torch-distributed' (needed by "
                        f"{len(claimed)} pending jobs)"]:
                    return False
            return True
        await eventually(shown_on_the_workers, timeout=30)
        jobsets = (await Resource(manager, JOBSETS).list(namespace=namespace))["items"]
        assert [j["metadata"]["name"] for j in jobsets] == ["not-claimed"]
    finally:
        for name in names.values():
            await Resource(manager, WORKER_CLUSTERS).delete(name)
        await Resource(manager, CLUSTER_TRAINING_RUNTIMES).delete("torch-distributed")


def staged(name: str) -> dict[str, Any]:
    """A runtime as the shipped ones are made: a dataset and a model initializer (2 CPU
    each, side by side), then the trainer (4 CPU a node), which `dependsOn` both."""
    def step(job_name: str, ancestor: str, cpu: str,
             depends: list[dict[str, str]] | None = None) -> dict[str, Any]:
        replicated: dict[str, Any] = {"name": job_name, "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"annotations": dict(QUICK)},
                "spec": {"containers": [{"name": job_name, "image": "busybox",
                                         "resources": {"requests": {"cpu": cpu,
                                                                    "memory": "1Gi"}}}]}}}}}
        if depends:
            replicated["dependsOn"] = depends
        return replicated

    complete = [{"name": "dataset-initializer", "status": "Complete"},
                {"name": "model-initializer", "status": "Complete"}]
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {
                "replicatedJobs": [
                    step("dataset-initializer", "dataset-initializer", "2"),
                    step("model-initializer", "model-initializer", "2"),
                    step("node", "trainer", "4", complete)]}}}}


async def test_peak_of_steps_books_what_the_real_steps_run_at_once(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    """2 nodes of the trainer (8 CPU) after 2 initializers (4 CPU): the sum (12) is more
    than a worker holds, the peak (8) is exactly what it holds, and the real chain runs
    the steps in that order, so the job runs."""
    namespace = chain_namespace
    async with chain.runtime(staged(f"{namespace}-staged")) as name:
        await dispatchers(placement={"demandMode": "PeakOfSteps"},
                          mirror={"origin": namespace, "keepFinished": True},
                          workers={"static": [
                              {"name": w, "kubeconfig": str(
                                  chain.plane.clusters[w].kubeconfig_path),
                               "quota": NODES.total()} for w in WORKERS]})
        jobs = Resource(chain.clients["manager"], TRAINJOBS)
        await jobs.create(trainjob("staged", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                   runtime=name, num_nodes=2), namespace=namespace)
        job = await eventually(lambda: finished(jobs, "staged", namespace), timeout=90)
        assert condition(job, "Complete")["status"] == "True", job["status"]
        assert "cpu=8" in job["metadata"]["annotations"][c.ANNOTATION_DEMAND].split(",")
        worker = job["metadata"]["annotations"][c.ANNOTATION_CLUSTER]
        pods = (await Resource(chain.clients[worker], PODS).list(namespace=namespace))["items"]
        by_step: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            step = pod["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name", "")
            by_step.setdefault(step, []).append(pod)
        assert sorted(by_step) == ["dataset-initializer", "model-initializer", "node"]
        assert len(by_step["node"]) == 2
        initializers_done = max(
            s["state"]["terminated"]["finishedAt"]
            for step in ("dataset-initializer", "model-initializer") for p in by_step[step]
            for s in p["status"]["containerStatuses"])
        assert all(p["metadata"]["creationTimestamp"] >= initializers_done
                   for p in by_step["node"]), "the trainer started before its initializers"


async def test_a_deadline_the_workers_trainer_enforces_fails_the_job_on_the_manager(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    namespace = chain_namespace
    long_running = sized(runtime(f"{namespace}-long"), cpu="1", runs_for="120s")
    async with chain.runtime(long_running) as name:
        await start(dispatchers, chain)
        jobs = Resource(chain.clients["manager"], TRAINJOBS)
        body = trainjob("late", namespace, managed_by=MANAGED_BY_MULTIKUEUE, runtime=name)
        body["spec"]["activeDeadlineSeconds"] = 3
        await jobs.create(body, namespace=namespace)
        job = await eventually(lambda: finished(jobs, "late", namespace), timeout=60)
        failed = condition(job, "Failed")
        assert (failed["status"], failed["reason"]) == ("True", "DeadlineExceeded"), failed
        assert c.ANNOTATION_EVICTIONS not in (job["metadata"].get("annotations") or {})
        assert condition(job, c.CONDITION_DISPATCHED)["reason"] == c.REASON_FINISHED


async def test_a_job_whose_pod_fits_no_node_is_placed_but_never_called_running(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    """5 CPU for one pod: within a worker's quota (8 CPU), more than any of its nodes holds
    (4 CPU). The worker's scheduler leaves the pod Pending, its Job counts it active, and
    the manager says the job waits for its pods there, not that it runs."""
    namespace = chain_namespace
    too_wide = sized(runtime(f"{namespace}-wide"), cpu="5")
    async with chain.runtime(too_wide) as name:
        dispatcher = await start(dispatchers, chain)
        jobs = Resource(chain.clients["manager"], TRAINJOBS)
        await jobs.create(trainjob("wide", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                   runtime=name), namespace=namespace)

        async def worker_of_job() -> str | None:
            job = await jobs.get("wide", namespace=namespace) or {"metadata": {}}
            return (job["metadata"].get("annotations") or {}).get(c.ANNOTATION_CLUSTER)
        worker = await eventually(worker_of_job, timeout=30)

        async def unschedulable() -> list[dict[str, Any]]:
            pods = (await Resource(chain.clients[worker], PODS).list(
                namespace=namespace))["items"]
            return [p for p in pods if any(
                x["type"] == "PodScheduled" and x.get("reason") == "Unschedulable"
                for x in p["status"].get("conditions") or [])]
        [pod] = await eventually(unschedulable, timeout=45)  # the scheduler has looked
        assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")

        async def seen_waiting() -> dict[str, Any] | None:
            """The manager shows what the worker's Trainer wrote: one Job active (its
            pod Pending counts), none ready."""
            job = await jobs.get("wide", namespace=namespace)
            statuses = ((job or {}).get("status") or {}).get("jobsStatus") or []
            return job if [(s["active"], s["ready"]) for s in statuses] == [(1, 0)] else None
        job = await eventually(seen_waiting, timeout=45)
        dispatched = condition(job, c.CONDITION_DISPATCHED)
        assert (dispatched["reason"], dispatched["message"]) == (
            c.REASON_PLACED, f"on worker {worker}, waiting for its pods to run there (pods "
                             f"jobset.sigs.k8s.io/jobset-name=wide; logs: dispatcher logs "
                             f"{namespace}/wide)")
        state = job_state(job, claim=Claim(ClaimConfig()), kind=TrainJobKind(),
                          placed_on=dispatcher.placements().get(job["metadata"]["uid"], ""))
        assert (state.state, state.worker) == (STATE_PLACED, worker)
        # What the gauges and the status page count, from the dispatcher's own cache once
        # it holds that status: placed there, not running.
        term = dispatcher.term
        assert term is not None
        await eventually(lambda: _cached_as(term.jobs, f"{namespace}/wide", job), timeout=10)
        [row] = [w for w in term.reading().workers if w.name == worker]
        assert (row.placed, row.running) == (1, 0)
        assert not condition(job, "Complete") and not condition(job, "Failed")
        await jobs.delete("wide", namespace=namespace)
        await eventually(lambda: _gone(chain.clients[worker], "wide", namespace), timeout=30)


async def _cached_as(controller: JobsController, key: str, job: dict[str, Any]) -> bool:
    cached = controller.trainjobs.get(key) or {}
    return bool((cached.get("status") or {}).get("jobsStatus") == job["status"]["jobsStatus"])


async def _gone(client: ClusterClient, name: str, namespace: str) -> bool:
    return await Resource(client, TRAINJOBS).get(name, namespace=namespace) is None


async def test_a_mirror_held_by_the_workers_kueue_waits_suspended_then_resumes_and_completes(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    """The worker's Kueue holds the mirror suspended (its LocalQueue is on hold), the
    Trainer says so (Suspended True), the manager shows why it waits; released, Kueue
    admits it, the Trainer resumes it (Suspended False, Resumed) and it completes."""
    namespace = chain_namespace
    worker = chain.clients[KUEUE_WORKER]
    cluster_queue = f"{namespace}-cq"
    quota = {k: v for k, v in NODES.total().items() if k != "pods"}
    await setup_queues(worker, cluster_queue_name=cluster_queue, local_queue_name="default",
                       namespaces=[namespace], quota=quota)
    queues = Resource(worker, LOCAL_QUEUES)
    await queues.merge_patch("default", {"spec": {"stopPolicy": "Hold"}}, namespace=namespace)
    await dispatchers(workers={"static": [
        {"name": KUEUE_WORKER, "kubeconfig": str(chain.plane.clusters[KUEUE_WORKER]
                                                 .kubeconfig_path),
         "quota": quota, "localQueue": "default", "clusterQueue": cluster_queue}]})
    jobs = Resource(chain.clients["manager"], TRAINJOBS)
    await jobs.create(trainjob("held", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                               runtime="torch-quick"), namespace=namespace)

    async def held() -> dict[str, Any] | None:
        job = await jobs.get("held", namespace=namespace)
        waiting = condition(job, c.CONDITION_DISPATCHED).get("reason") == (
            c.REASON_WAITING_FOR_ADMISSION)
        return job if waiting and condition(job, "Suspended").get("status") == "True" else None
    job = await eventually(held, timeout=30)
    assert condition(job, "Suspended")["reason"] == "Suspended"
    mirror = await Resource(worker, TRAINJOBS).get("held", namespace=namespace)
    assert mirror is not None and mirror["spec"]["suspend"] is True
    await queues.merge_patch("default", {"spec": {"stopPolicy": "None"}}, namespace=namespace)
    job = await eventually(lambda: finished(jobs, "held", namespace), timeout=60)
    assert condition(job, "Complete")["status"] == "True"
    resumed = condition(job, "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "Resumed"), resumed
    assert c.ANNOTATION_EVICTIONS not in (job["metadata"].get("annotations") or {})


async def test_a_workers_runtime_edited_before_the_mirror_is_made_rebooks_the_job(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    """Never a booking computed from one runtime for pods made from another. The job is
    booked on worker-a (2 nodes x 1 CPU) and waits for its mirror (the dispatcher is
    down, its mirror gone); worker-a's admin edits the runtime in place to 3 CPU a pod.
    The dispatcher comes back: the job is placed again (not an eviction), booked at what
    worker-a's runtime makes of it now, and its pods ask for exactly that."""
    namespace = chain_namespace
    clients = chain.clients
    name = f"{namespace}-edited"
    runtimes = {cluster: Resource(clients[cluster], CLUSTER_TRAINING_RUNTIMES)
                for cluster in ("manager", "worker-a")}
    for resource in runtimes.values():  # worker-b lacks it: the job goes to worker-a
        await resource.apply(sized(runtime(name), cpu="1", runs_for="60s"),
                             field_manager="tests")
    settings: dict[str, Any] = dict(mirror={"origin": namespace}, workers={"static": [
        {"name": w, "kubeconfig": str(chain.plane.clusters[w].kubeconfig_path),
         "quota": NODES.total()} for w in WORKERS]})
    jobs = Resource(clients["manager"], TRAINJOBS)
    mirrors = Resource(clients["worker-a"], TRAINJOBS)

    async def booked(cpu: str) -> dict[str, Any] | None:
        job = await jobs.get("edited", namespace=namespace) or {"metadata": {}}
        annotations = job["metadata"].get("annotations") or {}
        mirror = await mirrors.get("edited", namespace=namespace) or {"metadata": {}}
        on_mirror = (mirror["metadata"].get("annotations") or {}).get(c.ANNOTATION_DEMAND, "")
        return job if (annotations.get(c.ANNOTATION_CLUSTER) == "worker-a"
                       and f"cpu={cpu}" in annotations.get(c.ANNOTATION_DEMAND, "").split(",")
                       and f"cpu={cpu}" in on_mirror.split(",")) else None
    try:
        first = await dispatchers(**settings)
        await jobs.create(trainjob("edited", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                   runtime=name, num_nodes=2), namespace=namespace)
        await eventually(lambda: booked("2"), timeout=30)
        await dispatchers.stop(first)
        await mirrors.delete("edited", namespace=namespace)
        await eventually(lambda: _absent(mirrors, "edited", namespace), timeout=30)
        await runtimes["worker-a"].apply(sized(runtime(name), cpu="3", runs_for="60s"),
                                         field_manager="tests")
        await dispatchers(**settings)
        job = await eventually(lambda: booked("6"), timeout=30)
        assert c.ANNOTATION_EVICTIONS not in job["metadata"]["annotations"]

        async def pods_asking_3() -> bool:
            pods = (await Resource(clients["worker-a"], PODS).list(
                namespace=namespace))["items"]
            mine = [p for p in pods if p["metadata"]["name"].startswith("edited-")]
            return len(mine) == 2 and all(
                p["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3"
                for p in mine)
        await eventually(pods_asking_3, timeout=45)
    finally:
        for resource in runtimes.values():
            await resource.delete(name)


async def _absent(resource: Resource, name: str, namespace: str) -> bool:
    return await resource.get(name, namespace=namespace) is None


async def _none(listing: Awaitable[list[Any]]) -> bool:
    return not await listing


async def created_once_the_webhook_knows_the_runtime(jobs: Resource, body: dict[str, Any]
                                                     ) -> None:
    """Create `body`; the Trainer's webhook reads runtimes from its cache, which may not
    hold one applied a moment ago: its "must be created before" refusal is retried."""
    for _ in range(300):
        try:
            await jobs.create(body, namespace=body["metadata"]["namespace"])
            return
        except ApiException as error:
            if error.status != 403 or "must be created before" not in str(error.body):
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("the Trainer's webhook never saw the runtime")


def slow_runtime(name: str, seconds: int) -> dict[str, Any]:
    """torch-quick whose pods run `seconds` before they complete."""
    body = runtime(name)
    pod = body["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    for knob in ("delay", "jitter-delay"):
        pod["metadata"]["annotations"][f"pod-complete.stage.kwok.x-k8s.io/{knob}"] = (
            f"{seconds}s")
    return body


class Preemptions:
    """The preemption tests' setting on the chain: a low and a high WorkloadPriorityClass,
    the dispatcher's configuration, jobs pinned to a worker's pool, and a census of both
    workers (every 50 ms) that notes any job with two live mirrors."""

    def __init__(self, chain: Chain, namespace: str, *,
                 classes_on: tuple[str, ...] = ("manager",)) -> None:
        self.chain, self.namespace = chain, namespace
        self.classes_on = classes_on
        self.low, self.high = f"low-{namespace}", f"high-{namespace}"
        self.jobs = Resource(chain.clients["manager"], TRAINJOBS)
        self.mirrors = {w: Resource(chain.clients[w], TRAINJOBS) for w in WORKERS}
        self.twice: list[str] = []
        self.mirror_uids: dict[str, set[tuple[str, str]]] = {}
        """Job name -> every (worker, mirror UID) the census saw."""

    async def __aenter__(self) -> Preemptions:
        for cluster in self.classes_on:
            classes = Resource(self.chain.clients[cluster], WORKLOAD_PRIORITY_CLASSES)
            for name, value in ((self.low, 10), (self.high, 1000)):
                await classes.create({"apiVersion": WORKLOAD_PRIORITY_CLASSES.api_version,
                                      "kind": "WorkloadPriorityClass",
                                      "metadata": {"name": name}, "value": value})
        self._census = asyncio.create_task(self._count())
        return self

    async def __aexit__(self, *_: object) -> None:
        self._census.cancel()
        for job in (await self.jobs.list(namespace=self.namespace))["items"]:
            await self.jobs.delete(job["metadata"]["name"], namespace=self.namespace)

    def config(self, policy: str = "LowerPriority") -> dict[str, Any]:
        return {"mirror": {"origin": self.namespace},
                "placement": {"preemption": {"policy": policy}},
                "workers": {"static": [
                    {"name": w, "kubeconfig": str(self.chain.plane.clusters[w].kubeconfig_path),
                     "quota": NODES.total(), "labels": {"pool": w}} for w in WORKERS]}}

    async def create(self, name: str, *, pool: str | None, cpu: str, nodes: int,
                     priority: str, runtime_name: str) -> None:
        await created_once_the_webhook_knows_the_runtime(self.jobs, trainjob(
            name, self.namespace, managed_by=MANAGED_BY_MULTIKUEUE, runtime=runtime_name,
            num_nodes=nodes, resources_per_node={"requests": {"cpu": cpu, "memory": "1Gi"}},
            labels={c.LABEL_PRIORITY_CLASS: priority},
            annotations={c.ANNOTATION_CLUSTER_SELECTOR: f"pool={pool}"} if pool else None))

    async def running_on(self, worker: str, names: list[str]) -> bool:
        listed = (await self.mirrors[worker].list(namespace=self.namespace))["items"]
        return {m["metadata"]["name"] for m in listed} >= set(names)

    async def pods_of(self, worker: str, name: str) -> list[dict[str, Any]]:
        pods = await Resource(self.chain.clients[worker], PODS).list(namespace=self.namespace)
        return [p for p in pods["items"] if (p["metadata"].get("labels") or {}).get(
            "jobset.sigs.k8s.io/jobset-name") == name]

    async def runs(self, worker: str, name: str, pods: int) -> bool:
        found = await self.pods_of(worker, name)
        return len(found) == pods and all(p["status"].get("phase") == "Running"
                                          for p in found)

    async def reason(self, name: str) -> str:
        job = await self.jobs.get(name, namespace=self.namespace)
        return str(condition(job, c.CONDITION_DISPATCHED).get("reason", ""))

    async def preempted(self, name: str) -> list[dict[str, Any]]:
        return await events_of(self.chain.clients["manager"], self.namespace, name,
                               c.REASON_PREEMPTED)

    async def _count(self) -> None:
        while True:
            seen: dict[str, list[str]] = {}
            for worker, resource in self.mirrors.items():
                for mirror in (await resource.list(namespace=self.namespace))["items"]:
                    name = mirror["metadata"]["name"]
                    self.mirror_uids.setdefault(name, set()).add(
                        (worker, mirror["metadata"]["uid"]))
                    if not mirror["metadata"].get("deletionTimestamp"):
                        seen.setdefault(name, []).append(worker)
            self.twice.extend(f"{n} on {w}" for n, w in seen.items() if len(w) > 1)
            await asyncio.sleep(0.05)


async def test_an_urgent_job_preempts_the_cheapest_victims_on_one_worker_and_they_run_again(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    """Both workers are full of priority-10 jobs: worker-a of two 4-cpu jobs, worker-b of
    four 2-cpu ones. A 4-cpu job of priority 1000 preempts one job (the one started last on
    worker-a: one victim beats two), runs there, and nothing on worker-b is touched; the
    victim is requeued `Preempted` (not an eviction) and completes later. A census of both
    workers never sees two live mirrors of one job."""
    namespace = chain_namespace
    b_jobs = [f"b-{i}" for i in range(4)]
    async with chain.runtime(slow_runtime("torch-slow", 45)), Preemptions(
            chain, namespace) as setting:
        await dispatchers(**setting.config())
        await _fill_both_workers(setting, b_jobs)
        created = asyncio.get_running_loop().time()
        await setting.create("urgent", pool=None, cpu="2", nodes=2, priority=setting.high,
                             runtime_name="torch-slow")  # the victim waits while it runs
        await eventually(lambda: setting.mirrors["worker-a"].get("urgent", namespace=namespace),
                         timeout=30)
        mirrored = asyncio.get_running_loop().time() - created
        # Its pods wait for the victim's to end: by the garbage collector's cascade
        # from the deleted mirror, or by their own end (45 s), whichever comes first.
        await eventually(lambda: setting.runs("worker-a", "urgent", 2), timeout=120)
        took = asyncio.get_running_loop().time() - created
        print(f"urgent job mirrored on worker-a {mirrored:.1f}s and its 2 pods Running "
              f"{took:.1f}s after its creation")
        await eventually(lambda: _none(setting.pods_of("worker-a", "a-new")), timeout=30)
        assert len(await setting.pods_of("worker-a", "a-old")) == 2
        jobs = setting.jobs
        victim = await jobs.get("a-new", namespace=namespace)
        spared = await jobs.get("a-old", namespace=namespace)
        assert await setting.mirrors["worker-a"].get("a-new", namespace=namespace) is None
        assert await setting.mirrors["worker-a"].get("a-old", namespace=namespace) is not None, (
            "one victim is enough: the one started first is spared")
        shown = condition(victim, c.CONDITION_DISPATCHED)
        assert shown["reason"] in (c.REASON_PREEMPTED, c.REASON_WAITING_FOR_QUOTA), shown
        assert condition(spared, c.CONDITION_DISPATCHED)["reason"] == c.REASON_PLACED
        [event] = await setting.preempted("a-new")
        assert f"by {namespace}/urgent (priority 1000" in event["note"]
        assert "on worker worker-a" in event["note"]
        [told] = await events_of(chain.clients["manager"], namespace, "urgent",
                                 c.REASON_PREEMPTING)
        assert f"preempted {namespace}/a-new on worker worker-a" in told["note"]
        for name in b_jobs:
            assert not await setting.preempted(name)
        await _all_complete(setting, ["urgent", "a-new", "a-old", *b_jobs])
    _untouched_but_the_victim(setting, b_jobs)


async def test_a_dispatcher_stopped_mid_preemption_stops_no_second_victim(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    """As above, but the dispatcher is stopped the moment the urgent job is `Preempting`
    and another takes over from what the clusters hold: the urgent job runs on worker-a,
    a-new is the only job ever stopped (a-old and worker-b's keep their one mirror), no
    job ever has two live mirrors, and every job completes."""
    namespace = chain_namespace
    b_jobs = [f"b-{i}" for i in range(4)]
    async with chain.runtime(slow_runtime("torch-slow", 45)), Preemptions(
            chain, namespace) as setting:
        first = await dispatchers(**setting.config())
        await _fill_both_workers(setting, b_jobs)
        await setting.create("urgent", pool=None, cpu="2", nodes=2, priority=setting.high,
                             runtime_name="torch-slow")
        await eventually(lambda: _is(setting.reason("urgent"), c.REASON_PREEMPTING),
                         timeout=30)
        await dispatchers.stop(first)
        await dispatchers(**setting.config())
        await eventually(lambda: setting.runs("worker-a", "urgent", 2), timeout=120)
        for name in ("a-old", *b_jobs):
            assert not await setting.preempted(name), f"{name} was stopped too"
        await _all_complete(setting, ["urgent", "a-new", "a-old", *b_jobs])
        # Taken off (by either dispatcher: the first may stop before its Preempted event
        # is written) and run again: a second mirror; every other job kept its one.
        assert len(setting.mirror_uids["a-new"]) == 2, setting.mirror_uids["a-new"]
        for name in ("a-old", *b_jobs):
            assert len(setting.mirror_uids[name]) == 1, f"{name} was stopped too"
        victim = await setting.jobs.get("a-new", namespace=namespace)
        assert (victim or {})["metadata"].get("annotations", {}).get(
            c.ANNOTATION_EVICTIONS, "0") == "0", "a preemption is not an eviction"
    _untouched_but_the_victim(setting, b_jobs)


async def test_no_preemption_when_it_fits_elsewhere_for_equal_priority_or_with_never(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    """worker-a is full of priority-10 jobs. A priority-1000 job that fits on worker-b goes
    there and stops nothing; with worker-b full too, a priority-10 job waits for quota and
    stops nothing; and a dispatcher with `policy: Never` leaves a priority-1000 job waiting
    too. Every running job keeps its one mirror throughout."""
    async with chain.runtime(slow_runtime("torch-long", 120)), Preemptions(
            chain, chain_namespace) as setting:
        first = await dispatchers(**setting.config())
        for name in ("a-1", "a-2"):
            await setting.create(name, pool="worker-a", cpu="2", nodes=2, priority=setting.low,
                                 runtime_name="torch-long")
        await eventually(lambda: setting.running_on("worker-a", ["a-1", "a-2"]), timeout=30)
        await setting.create("fits", pool=None, cpu="2", nodes=2, priority=setting.high,
                             runtime_name="torch-long")
        await eventually(lambda: setting.running_on("worker-b", ["fits"]), timeout=30)
        await setting.create("b-low", pool="worker-b", cpu="2", nodes=2,
                             priority=setting.low, runtime_name="torch-long")
        await eventually(lambda: setting.running_on("worker-b", ["b-low"]), timeout=30)
        await setting.create("equal", pool=None, cpu="2", nodes=2, priority=setting.low,
                             runtime_name="torch-long")
        await _waits_for_quota(setting, "equal")
        await dispatchers.stop(first)
        await dispatchers(**setting.config("Never"))
        await setting.create("never", pool=None, cpu="2", nodes=2, priority=setting.high,
                             runtime_name="torch-long")
        await _waits_for_quota(setting, "never")
        for name in ("a-1", "a-2", "fits", "b-low"):
            assert not await setting.preempted(name), f"{name} was preempted"
            assert len(setting.mirror_uids[name]) == 1, f"{name} was moved"
    assert not setting.twice, f"two live mirrors of one job: {setting.twice[:5]}"


async def test_a_workers_kueue_stops_no_second_job_for_the_dispatchers_preemptor(
    chain: Chain, dispatchers: DispatcherRunner, chain_namespace: str,
) -> None:
    """On the worker running Kueue (its ClusterQueue preempts lower priorities itself),
    four priority-10 jobs of 2 cpu fill its 8 cpu. A 2-cpu job of priority 1000 makes the
    dispatcher stop one of them; its mirror reaches the worker's Kueue only once that
    Kueue has the room back, so Kueue admits it without preempting: the other three keep
    their one mirror and their Workloads are never evicted, and every job completes."""
    namespace = chain_namespace
    worker = chain.clients[KUEUE_WORKER]
    cluster_queue = f"{namespace}-cq"
    quota = {k: v for k, v in NODES.total().items() if k != "pods"}
    await setup_queues(worker, cluster_queue_name=cluster_queue, local_queue_name="default",
                       namespaces=[namespace], quota=quota,
                       preemption={"withinClusterQueue": "LowerPriority"})
    low_jobs = [f"low-{i}" for i in range(4)]
    async with chain.runtime(slow_runtime("torch-slow", 45)), Preemptions(
            chain, namespace, classes_on=("manager", KUEUE_WORKER)) as setting:
        await dispatchers(mirror={"origin": namespace},
                          placement={"preemption": {"policy": "LowerPriority"}},
                          workers={"static": [{
                              "name": KUEUE_WORKER,
                              "kubeconfig": str(chain.plane.clusters[KUEUE_WORKER]
                                                .kubeconfig_path),
                              "quota": quota, "localQueue": "default",
                              "clusterQueue": cluster_queue}]})
        for name in low_jobs:
            await setting.create(name, pool=None, cpu="2", nodes=1, priority=setting.low,
                                 runtime_name="torch-slow")
        await eventually(lambda: _all_run(setting, low_jobs), timeout=60)
        await setting.create("urgent", pool=None, cpu="2", nodes=1, priority=setting.high,
                             runtime_name="torch-slow")
        await eventually(lambda: setting.runs(KUEUE_WORKER, "urgent", 1), timeout=120)
        stopped = [name for name in low_jobs if await setting.preempted(name)]
        assert len(stopped) == 1, f"the dispatcher stopped {stopped}"
        evicted = await _evicted_workloads(worker, namespace)
        assert not evicted, f"the worker's Kueue evicted {evicted} as well"
        for name in low_jobs:
            if name not in stopped:
                assert len(setting.mirror_uids[name]) == 1, f"{name} was stopped too"
        await _all_complete(setting, ["urgent", *low_jobs])
    assert not setting.twice, f"two live mirrors of one job: {setting.twice[:5]}"


async def _all_run(setting: Preemptions, names: list[str]) -> bool:
    for name in names:
        if not await setting.runs(KUEUE_WORKER, name, 1):
            return False
    return True


async def _evicted_workloads(client: ClusterClient, namespace: str) -> list[str]:
    """The Workloads in `namespace` that Kueue evicted or preempted at some point."""
    listed = (await Resource(client, WORKLOADS).list(namespace=namespace))["items"]
    return [w["metadata"]["name"] for w in listed
            if any(cond["type"] in ("Evicted", "Preempted") and cond["status"] == "True"
                   for cond in (w.get("status") or {}).get("conditions") or [])]


async def _waits_for_quota(setting: Preemptions, name: str) -> None:
    """`name` is `WaitingForQuota`, and still so three seconds (many passes) later."""
    await eventually(lambda: _is(setting.reason(name), c.REASON_WAITING_FOR_QUOTA),
                     timeout=30)
    await asyncio.sleep(3)
    assert await setting.reason(name) == c.REASON_WAITING_FOR_QUOTA


async def _is(value: Awaitable[str], expected: str) -> bool:
    return await value == expected


async def _fill_both_workers(setting: Preemptions, b_jobs: list[str]) -> None:
    """worker-a: a-old then a-new, 4 cpu each; worker-b: `b_jobs` of 2 cpu; all priority 10."""
    for name in ("a-old", "a-new"):
        await setting.create(name, pool="worker-a", cpu="2", nodes=2, priority=setting.low,
                             runtime_name="torch-slow")
        await eventually(functools.partial(setting.running_on, "worker-a", [name]),
                         timeout=30)
    for name in b_jobs:
        await setting.create(name, pool="worker-b", cpu="2", nodes=1, priority=setting.low,
                             runtime_name="torch-slow")
    await eventually(lambda: setting.running_on("worker-b", b_jobs), timeout=30)


async def _all_complete(setting: Preemptions, names: list[str]) -> None:
    for name in names:
        done = await eventually(functools.partial(finished, setting.jobs, name,
                                                  setting.namespace), timeout=120)
        assert condition(done, "Complete").get("status") == "True", name


def _untouched_but_the_victim(setting: Preemptions, b_jobs: list[str]) -> None:
    """No job had two live mirrors; only a-new was remade (it ran again)."""
    assert not setting.twice, f"two live mirrors of one job: {setting.twice[:5]}"
    for name in b_jobs:
        assert len(setting.mirror_uids[name]) == 1, f"{name} was untouched: one mirror"
    assert len(setting.mirror_uids["a-new"]) == 2, "the victim ran again: a second mirror"
    assert len(setting.mirror_uids["a-old"]) == 1
