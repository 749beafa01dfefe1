"""Registering workers on the manager: a kubeconfig Secret and a WorkerCluster object.

Used by the demo and the admin CLI; both write through server-side apply, so repeating a
registration (or rotating credentials) is the same operation.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api.workercluster import API_VERSION, DEFAULT_SECRET_KEY, WORKER_CLUSTERS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import NAMESPACES, SECRETS, Resource


def secret_name(worker: str) -> str:
    return f"worker-{worker}-kubeconfig"


async def ensure_namespace(client: ClusterClient, name: str) -> None:
    try:
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ApiException as error:
        if error.status != 409:
            raise


async def store_kubeconfig(manager: ClusterClient, *, namespace: str, worker: str,
                           kubeconfig: dict[str, Any]) -> str:
    """Write the worker's kubeconfig into its Secret; returns the Secret's name."""
    name = secret_name(worker)
    data = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
    await Resource(manager, SECRETS).apply({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {c.LABEL_ORIGIN: "admin"}},
        "type": "Opaque",
        "data": {DEFAULT_SECRET_KEY: data},
    }, field_manager=c.FIELD_MANAGER)
    return name


async def register_worker(
    manager: ClusterClient,
    *,
    namespace: str,
    name: str,
    kubeconfig: dict[str, Any],
    quota: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    local_queue: str = "",
    cluster_queue: str = "",
) -> None:
    await ensure_namespace(manager, namespace)
    secret = await store_kubeconfig(manager, namespace=namespace, worker=name,
                                    kubeconfig=kubeconfig)
    spec: dict[str, Any] = {"kubeconfigSecretRef": {"name": secret, "key": DEFAULT_SECRET_KEY}}
    if quota:
        spec["quota"] = quota
    if local_queue:
        spec["localQueue"] = local_queue
    if cluster_queue:
        spec["clusterQueue"] = cluster_queue
    await Resource(manager, WORKER_CLUSTERS).apply({
        "apiVersion": API_VERSION, "kind": "WorkerCluster",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }, field_manager=c.FIELD_MANAGER)
