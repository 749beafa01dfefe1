"""Kueue's objects (v1beta2) as a harness sets them up: queues on a worker, MultiKueue.

`setup_queues()` gives one cluster a ResourceFlavor, a ClusterQueue with a quota and,
in each namespace named, a LocalQueue pointing at it: a worker "with Kueue". With
`admission_check` the ClusterQueue also waits for that AdmissionCheck, which is how the
manager's queue hands its jobs to MultiKueue. `setup_multikueue()` creates, on the
manager, one kubeconfig Secret and one MultiKueueCluster per worker, a MultiKueueConfig
listing them and the MultiKueue AdmissionCheck, and waits until all are Active. The
dispatcher itself never writes these: only the harness does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import yaml

from devkit.localcluster.kueue import KUEUE_NAMESPACE
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import SECRETS, Resource, ResourceKind

JSON = dict[str, Any]
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
RESOURCE_FLAVORS = ResourceKind(GROUP, VERSION, "resourceflavors", namespaced=False)
CLUSTER_QUEUES = ResourceKind(GROUP, VERSION, "clusterqueues", namespaced=False)
LOCAL_QUEUES = ResourceKind(GROUP, VERSION, "localqueues", namespaced=True)
WORKLOADS = ResourceKind(GROUP, VERSION, "workloads", namespaced=True)
ADMISSION_CHECKS = ResourceKind(GROUP, VERSION, "admissionchecks", namespaced=False)
WORKLOAD_PRIORITY_CLASSES = ResourceKind(GROUP, VERSION, "workloadpriorityclasses",
                                         namespaced=False)
MULTIKUEUE_CONFIGS = ResourceKind(GROUP, VERSION, "multikueueconfigs", namespaced=False)
MULTIKUEUE_CLUSTERS = ResourceKind(GROUP, VERSION, "multikueueclusters", namespaced=False)
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
KUBECONFIG_KEY = "kubeconfig"
FIELD_MANAGER = "trainjob-dispatcher-harness"
ACTIVE_TIMEOUT_SECONDS = 60.0


def resource_flavor(name: str, *, node_labels: dict[str, str] | None = None) -> JSON:
    """A ResourceFlavor; with `node_labels`, Kueue puts them in the node selector of the
    jobs it admits with it (for a TrainJob: in its own entry of `spec.runtimePatches`)."""
    flavor: JSON = {"apiVersion": API_VERSION, "kind": "ResourceFlavor",
                    "metadata": {"name": name}}
    if node_labels:
        flavor["spec"] = {"nodeLabels": dict(node_labels)}
    return flavor


def cluster_queue(name: str, *, flavor: str, quota: dict[str, str],
                  admission_check: str | None = None, cohort: str = "",
                  preemption: JSON | None = None) -> JSON:
    """A ClusterQueue admitting from every namespace, one flavor, `quota` per resource;
    optionally in a cohort, with a preemption policy."""
    spec: JSON = {
        "namespaceSelector": {},
        "resourceGroups": [{
            "coveredResources": sorted(quota),
            "flavors": [{"name": flavor, "resources": [
                {"name": res, "nominalQuota": amount} for res, amount in sorted(quota.items())
            ]}],
        }],
    }
    if admission_check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": admission_check}]}
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = preemption
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": spec}


def local_queue(name: str, *, namespace: str, cluster_queue_name: str) -> JSON:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name}}


def workload_priority_class(name: str, value: int) -> JSON:
    return {"apiVersion": API_VERSION, "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value}


async def setup_queues(client: ClusterClient, *, cluster_queue_name: str, local_queue_name: str,
                       namespaces: list[str], quota: dict[str, str], flavor: str = "default",
                       admission_check: str | None = None, cohort: str = "",
                       preemption: JSON | None = None,
                       flavor_labels: dict[str, str] | None = None) -> None:
    """Flavor, ClusterQueue and LocalQueues on one cluster (idempotent: applied; every
    caller of one flavor should give it the same `flavor_labels`)."""
    await Resource(client, RESOURCE_FLAVORS).apply(
        resource_flavor(flavor, node_labels=flavor_labels), field_manager=FIELD_MANAGER)
    await Resource(client, CLUSTER_QUEUES).apply(
        cluster_queue(cluster_queue_name, flavor=flavor, quota=quota,
                      admission_check=admission_check, cohort=cohort, preemption=preemption),
        field_manager=FIELD_MANAGER)
    for namespace in namespaces:
        await Resource(client, LOCAL_QUEUES).apply(
            local_queue(local_queue_name, namespace=namespace,
                        cluster_queue_name=cluster_queue_name), field_manager=FIELD_MANAGER)


def _active(obj: JSON | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


async def wait_active(client: ClusterClient, kind: ResourceKind, names: list[str], *,
                      namespace: str | None = None,
                      timeout: float = ACTIVE_TIMEOUT_SECONDS) -> None:
    """Until every named object has the condition Active=True."""
    deadline = time.monotonic() + timeout
    resource = Resource(client, kind)
    pending = list(names)
    while pending:
        pending = [n for n in pending if not _active(await resource.get(n, namespace=namespace))]
        if not pending:
            return
        if time.monotonic() > deadline:
            details = {n: await resource.get(n, namespace=namespace) for n in pending}
            raise TimeoutError(f"{kind.plural} not Active after {timeout}s: "
                               f"{ {n: (d or {}).get('status') for n, d in details.items()} }")
        await asyncio.sleep(0.2)


async def setup_multikueue(manager: ClusterClient, *, workers: dict[str, JSON],
                           config_name: str, check_name: str) -> None:
    """MultiKueue on the manager for `workers` (name -> kubeconfig with inline
    credentials): Secrets, MultiKueueClusters, a MultiKueueConfig, the AdmissionCheck."""
    for name, kubeconfig in workers.items():
        await Resource(manager, SECRETS).apply({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": f"multikueue-{name}", "namespace": KUEUE_NAMESPACE},
            "stringData": {KUBECONFIG_KEY: yaml.safe_dump(kubeconfig)},
        }, field_manager=FIELD_MANAGER)
        await Resource(manager, MULTIKUEUE_CLUSTERS).apply({
            "apiVersion": API_VERSION, "kind": "MultiKueueCluster", "metadata": {"name": name},
            "spec": {"clusterSource": {"kubeConfig": {
                "locationType": "Secret", "location": f"multikueue-{name}"}}},
        }, field_manager=FIELD_MANAGER)
    await Resource(manager, MULTIKUEUE_CONFIGS).apply({
        "apiVersion": API_VERSION, "kind": "MultiKueueConfig", "metadata": {"name": config_name},
        "spec": {"clusters": sorted(workers)},
    }, field_manager=FIELD_MANAGER)
    await Resource(manager, ADMISSION_CHECKS).apply({
        "apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": check_name},
        "spec": {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": {
            "apiGroup": GROUP, "kind": "MultiKueueConfig", "name": config_name}},
    }, field_manager=FIELD_MANAGER)
    await wait_active(manager, MULTIKUEUE_CLUSTERS, sorted(workers))
    await wait_active(manager, ADMISSION_CHECKS, [check_name])
