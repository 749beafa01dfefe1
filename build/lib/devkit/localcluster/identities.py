"""A namespace user with a real token on a local cluster: a ServiceAccount bound to a
Role on TrainJobs in one namespace, and its token (TokenRequest), the identity a user
hands `dispatcher logs` (a client certificate cannot be handed on)."""

from __future__ import annotations

import copy
from typing import Any

from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource, ResourceKind

JSON = dict[str, Any]
SERVICE_ACCOUNTS = ResourceKind("", "v1", "serviceaccounts", namespaced=True)
ROLES = ResourceKind("rbac.authorization.k8s.io", "v1", "roles", namespaced=True)
ROLE_BINDINGS = ResourceKind("rbac.authorization.k8s.io", "v1", "rolebindings",
                             namespaced=True)
TRAINJOB_USER_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
_FIELD_MANAGER = "devkit.trainjob-dispatcher.io/identities"


async def namespace_user_token(client: ClusterClient, namespace: str, *, name: str,
                               verbs: tuple[str, ...] = TRAINJOB_USER_VERBS,
                               seconds: int = 86_400) -> str:
    """The token of ServiceAccount `name` in `namespace`, which may `verbs` TrainJobs
    there and read the events there (what `kubectl describe` shows), nothing else."""
    await Resource(client, SERVICE_ACCOUNTS).apply({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace}}, field_manager=_FIELD_MANAGER)
    await Resource(client, ROLES).apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [{"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"],
                   "verbs": list(verbs)},
                  {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
                   "verbs": ["get", "list", "watch"]}]}, field_manager=_FIELD_MANAGER)
    await Resource(client, ROLE_BINDINGS).apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
        field_manager=_FIELD_MANAGER)
    request = await client.request(
        "POST", SERVICE_ACCOUNTS.path(namespace=namespace, name=name, subresource="token"),
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": seconds}}, verb="create")
    return str(request["status"]["token"])


def with_token(kubeconfig: JSON, *, user: str, token: str, namespace: str) -> JSON:
    """`kubeconfig` (one cluster) for `user`, who authenticates with `token`."""
    config = copy.deepcopy(kubeconfig)
    config["users"] = [{"name": user, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"].update(user=user, namespace=namespace)
    return config
