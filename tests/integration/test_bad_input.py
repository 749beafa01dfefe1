"""Hostile and impossible TrainJobs on real API servers: each ends in a reason a person can
read on the manager's TrainJob (its Dispatched condition and events, what `kubectl
describe` shows), nothing is booked for it, and the jobs beside it run as usual."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.binaries import ensure_binaries
from dispatcher.admin import register_worker
from dispatcher.api import constants as c
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.api.workercluster import API_VERSION, WORKER_CLUSTERS
from dispatcher.app import Dispatcher
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import EVENTS, Resource
from dispatcher.placement.resources import parse_vector
from tests.integration.conftest import StartDispatcher, eventually

pytestmark = pytest.mark.integration
QUOTA = {"cpu": "8", "memory": "64Gi"}


async def described(clients: dict[str, ClusterClient], namespace: str,
                    name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The job's Dispatched condition and its events, as `kubectl describe` lists them."""
    job = await Resource(clients["manager"], TRAINJOBS).get(name, namespace=namespace) or {}
    dispatched = next((cond for cond in (job.get("status") or {}).get("conditions") or []
                       if cond["type"] == c.CONDITION_DISPATCHED), {})
    listed = await Resource(clients["manager"], EVENTS).list(namespace=namespace)
    events = [e for e in listed["items"] if e["regarding"]["name"] == name]
    return dispatched, events


async def kubectl_describe(control_plane: LocalControlPlane, namespace: str,
                           name: str) -> str:
    """What `kubectl describe trainjob` prints, with the kubectl built with the plane."""
    process = await asyncio.create_subprocess_exec(
        str(ensure_binaries() / "kubectl"), "--kubeconfig",
        str(control_plane.clusters["manager"].kubeconfig_path), "describe", "trainjob", name,
        "-n", namespace, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()
    return output.decode()


async def reason_of(clients: dict[str, ClusterClient], namespace: str, name: str,
                    reason: str) -> dict[str, Any] | None:
    dispatched, _ = await described(clients, namespace, name)
    return dispatched if dispatched.get("reason") == reason else None


async def submit(clients: dict[str, ClusterClient], namespace: str, name: str,
                 **kwargs: Any) -> None:
    await Resource(clients["manager"], TRAINJOBS).create(
        trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE, **kwargs),
        namespace=namespace)


async def metric_values(dispatcher: Dispatcher, name: str) -> dict[str, float]:
    assert dispatcher.server is not None
    url = f"http://127.0.0.1:{dispatcher.server.port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    return {sample.labels.get("reason", ""): sample.value
            for family in text_string_to_metric_families(text) if family.name == name
            for sample in family.samples}


async def test_invalid_jobs_get_named_reasons_and_book_nothing(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str], control_plane: LocalControlPlane,
) -> None:
    cyclic_runtime = f"{namespace}-cyclic"
    cyclic = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
              "metadata": {"name": cyclic_runtime},
              "spec": {"template": {"spec": {"replicatedJobs": [
                  {"name": name, "dependsOn": [{"name": other, "status": "Complete"}],
                   "template": {"spec": {"template": {"spec": {
                       "containers": [{"name": name, "image": "x"}]}}}}}
                  for name, other in (("node", "prepare"), ("prepare", "node"))]}}}}
    await Resource(admin_clients["manager"], CLUSTER_TRAINING_RUNTIMES).create(cyclic)
    dispatcher = await start_dispatcher(workers={"static": [
        {"name": "worker-a", "kubeconfig": worker_kubeconfigs["worker-a"], "quota": QUOTA}]})
    try:
        await submit(admin_clients, namespace, "negative",
                     resources_per_node={"requests": {"cpu": "-1"}})
        await submit(admin_clients, namespace, "zero-nodes", num_nodes=0)
        await submit(admin_clients, namespace, "bad-selector",
                     annotations={c.ANNOTATION_CLUSTER_SELECTOR: "gpu in (a100"})
        await submit(admin_clients, namespace, "cyclic", runtime=cyclic_runtime)
        # Eight 1-CPU jobs fill the 8-CPU worker: the negative job freed nothing.
        for i in range(9):
            await submit(admin_clients, namespace, f"normal-{i}")

        expected = {
            "negative": (c.REASON_INVALID_RESOURCES,
                         "spec.trainer.resourcesPerNode.requests[cpu]: '-1' is negative"),
            "zero-nodes": (c.REASON_INVALID_RESOURCES,
                           "spec.trainer.numNodes: 0 must be at least 1"),
            "bad-selector": (c.REASON_INVALID_CLUSTER_SELECTOR,
                             f"annotation {c.ANNOTATION_CLUSTER_SELECTOR}: cannot parse"),
            "cyclic": (c.REASON_INVALID_RUNTIME, "dependsOn cycle"),
        }
        for name, (reason, text) in expected.items():
            dispatched = await eventually(
                lambda name=name, reason=reason: reason_of(admin_clients, namespace, name,
                                                           reason))
            assert dispatched["status"] == "False"
            assert text in dispatched["message"], dispatched["message"]
            _, events = await eventually(
                lambda name=name: _with_events(admin_clients, namespace, name))
            assert any(e["reason"] == reason and e["type"] == "Warning" and text in e["note"]
                       for e in events), events
            job = await Resource(admin_clients["manager"], TRAINJOBS).get(
                name, namespace=namespace)
            assert job is not None and c.ANNOTATION_CLUSTER not in (
                job["metadata"].get("annotations") or {})
            described_text = " ".join((await kubectl_describe(control_plane, namespace,
                                                              name)).split())
            assert f"Reason: {reason}" in described_text, described_text
            assert f"Warning {reason}" in described_text, described_text

        waiting = await eventually(lambda: reason_of(admin_clients, namespace, "normal-8",
                                                     c.REASON_WAITING_FOR_QUOTA))
        assert "no worker has 1 cpu free" in waiting["message"]
        listed = await Resource(admin_clients["manager"], TRAINJOBS).list(namespace=namespace)
        placed = [j["metadata"]["name"] for j in listed["items"]
                  if c.ANNOTATION_CLUSTER in (j["metadata"].get("annotations") or {})]
        assert len(placed) == 8 and all(name.startswith("normal-") for name in placed)
        assert dispatcher.ledger.used("worker-a")["cpu"] == 8
        assert dispatcher.ledger.violations({"worker-a": parse_vector(QUOTA)}) == []

        async def counted() -> dict[str, float] | None:
            values = await metric_values(dispatcher, "dispatcher_jobs_by_reason")
            # The gauges refresh every 2 s: wait for one read after normal-8's wait shows.
            return values if (values.get(c.REASON_INVALID_RESOURCES) == 2 and values.get(
                c.REASON_WAITING_FOR_QUOTA) == 1) else None
        values = await eventually(counted, timeout=10)
        assert values[c.REASON_INVALID_CLUSTER_SELECTOR] == 1
        assert values[c.REASON_INVALID_RUNTIME] == 1
        # Placed: "New" until the worker's Trainer writes the mirror's first status.
        assert values.get("New", 0) + values.get(c.REASON_PLACED, 0) == 8
        assert values[c.REASON_WAITING_FOR_QUOTA] == 1
    finally:
        await Resource(admin_clients["manager"], CLUSTER_TRAINING_RUNTIMES).delete(
            cyclic_runtime)


async def _with_events(clients: dict[str, ClusterClient], namespace: str,
                       name: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    dispatched, events = await described(clients, namespace, name)
    return (dispatched, events) if events else None


async def test_never_fits_waits_for_a_worker_then_runs_once_it_is_usable(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    control_plane: LocalControlPlane,
) -> None:
    """Too big for every healthy worker: Unschedulable naming the largest. Once a big
    enough worker is registered but broken, the job waits for it by name; the moment it
    is fixed, the job is placed there."""
    dispatcher = await start_dispatcher(workers={"fromCRD": True, "static": [
        {"name": "worker-a", "kubeconfig": str(control_plane.clusters["worker-a"]
                                               .kubeconfig_path), "quota": QUOTA}]})
    await submit(admin_clients, namespace, "huge",
                 resources_per_node={"requests": {"cpu": "100"}})
    await submit(admin_clients, namespace, "fpga",
                 resources_per_node={"limits": {"example.com/fpga": "1"}})
    huge = await eventually(lambda: reason_of(admin_clients, namespace, "huge",
                                              c.REASON_UNSCHEDULABLE))
    assert huge["message"] == "needs 100 cpu; the only matching worker, worker-a, has 8 in total"
    shown = " ".join((await kubectl_describe(control_plane, namespace, "huge")).split())
    assert f"Reason: {c.REASON_UNSCHEDULABLE}" in shown and "has 8 in total" in shown
    fpga = await eventually(lambda: reason_of(admin_clients, namespace, "fpga",
                                              c.REASON_UNSCHEDULABLE))
    assert fpga["message"] == ("needs 1 example.com/fpga; "
                               "no matching worker offers example.com/fpga")

    big = f"{namespace}-big"
    workers = Resource(admin_clients["manager"], WORKER_CLUSTERS)
    await workers.create({
        "apiVersion": API_VERSION, "kind": "WorkerCluster", "metadata": {"name": big},
        "spec": {"kubeconfigSecretRef": {"name": f"worker-{big}-kubeconfig"},
                 "quota": {"cpu": "128", "memory": "1Ti", "example.com/fpga": "2"}}})
    try:
        for name in ("huge", "fpga"):
            waiting = await eventually(
                lambda name=name: reason_of(admin_clients, namespace, name,
                                            c.REASON_NO_ACTIVE_WORKER), timeout=15)
            assert waiting["message"].startswith(
                f"only workers that are not active could hold it: {big} (SecretNotFound: ")
            assert "worker-a" not in waiting["message"]
        shown = " ".join((await kubectl_describe(control_plane, namespace, "huge")).split())
        assert f"Reason: {c.REASON_NO_ACTIVE_WORKER}" in shown and "SecretNotFound" in shown

        kubeconfig = yaml.safe_load(control_plane.clusters["worker-b"].kubeconfig_path
                                    .read_text())
        await register_worker(admin_clients["manager"], namespace=dispatcher.config.namespace,
                              name=big, kubeconfig=kubeconfig,
                              quota={"cpu": "128", "memory": "1Ti", "example.com/fpga": "2"})
        for name in ("huge", "fpga"):
            mirror = await eventually(
                lambda name=name: Resource(admin_clients["worker-b"], TRAINJOBS).get(
                    name, namespace=namespace), timeout=20)
            assert mirror["metadata"]["annotations"][c.ANNOTATION_MANAGER_UID]
            job = await Resource(admin_clients["manager"], TRAINJOBS).get(
                name, namespace=namespace)
            assert job is not None
            assert job["metadata"]["annotations"][c.ANNOTATION_CLUSTER] == big
    finally:
        await workers.delete(big)
