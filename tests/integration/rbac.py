"""A real RBAC-limited identity for the tests of what a namespace user cannot do."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from kubernetes_asyncio.client.exceptions import ApiException

from devkit.localcluster import LocalControlPlane
from devkit.localcluster.pki import sign_client_certificate
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.resource import Resource, ResourceKind
from tests.integration.conftest import eventually

_ROLES = ResourceKind("rbac.authorization.k8s.io", "v1", "roles", namespaced=True)
_ROLE_BINDINGS = ResourceKind("rbac.authorization.k8s.io", "v1", "rolebindings",
                              namespaced=True)


@contextlib.asynccontextmanager
async def namespace_editor(control_plane: LocalControlPlane, admin: ClusterClient,
                           namespace: str) -> AsyncIterator[ClusterClient]:
    """A client for a user who may do anything to TrainJobs in `namespace` but write
    their status (what the `edit` role gives on them), and nothing elsewhere."""
    user = f"{namespace}-editor"
    await Resource(admin, _ROLES).create({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "trainjob-editor", "namespace": namespace},
        "rules": [{"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete",
                             "deletecollection"]}]}, namespace=namespace)
    await Resource(admin, _ROLE_BINDINGS).create({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "trainjob-editor", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "trainjob-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": user}]}, namespace=namespace)
    cluster = control_plane.clusters["manager"]
    cert, key = sign_client_certificate(cluster.certs, user=user, groups=[])
    client = await ClusterClient.from_kubeconfig(
        name=user, kubeconfig=cluster.kubeconfig(user=user, cert=cert, key=key),
        settings=ClientSettings(qps=100, burst=100, timeout_seconds=10))
    try:
        jobs = Resource(client, TRAINJOBS)
        await eventually(lambda: _can_list(jobs, namespace), timeout=10)  # RBAC in force
        yield client
    finally:
        await client.close()


async def _can_list(jobs: Resource, namespace: str) -> bool:
    try:
        await jobs.list(namespace=namespace)
    except ApiException:
        return False
    return True


