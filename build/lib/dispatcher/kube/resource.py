"""Generic access to one kind of object in one cluster, as JSON dictionaries.

`ResourceKind` names a REST resource (group, version, plural, scope); `Resource` binds it
to a `ClusterClient` and offers the verbs the controllers need: get, list, create,
merge-patch (of the object or its status), server-side apply and delete. Nothing here
knows what the objects mean.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.kube.client import JSON, ClusterClient

MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


@dataclass(frozen=True)
class ResourceKind:
    """A REST resource: `group` is empty for the core API."""

    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            root += f"/namespaces/{namespace}"
        path = f"{root}/{self.plural}"
        if name:
            path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
        return path


NAMESPACES = ResourceKind("", "v1", "namespaces", namespaced=False)
SECRETS = ResourceKind("", "v1", "secrets", namespaced=True)
PODS = ResourceKind("", "v1", "pods", namespaced=True)
EVENTS = ResourceKind("events.k8s.io", "v1", "events", namespaced=True)
CRDS = ResourceKind("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)
LEASES = ResourceKind("coordination.k8s.io", "v1", "leases", namespaced=True)


def status_of(error: BaseException) -> int:
    """HTTP status of an ApiException, 0 for anything else."""
    return (error.status or 0) if isinstance(error, ApiException) else 0


def message_of(error: BaseException) -> str:
    """The API server's message for a failed request, or the exception's text."""
    if isinstance(error, ApiException):
        try:
            body = json.loads(error.body or "{}")
            return str(body.get("message") or error.reason or error.status)
        except (ValueError, AttributeError):
            return str(error.reason or error.status)
    return str(error) or type(error).__name__


class Resource:
    """One `ResourceKind` in one cluster."""

    def __init__(self, client: ClusterClient, kind: ResourceKind) -> None:
        self.client = client
        self.kind = kind

    async def get(self, name: str, *, namespace: str | None = None) -> JSON | None:
        """The object, or None when it does not exist."""
        try:
            return await self.client.request(
                "GET", self.kind.path(namespace=namespace, name=name), verb="get"
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def list(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        timeout: float | None = None,
    ) -> JSON:
        query: list[tuple[str, Any]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if limit:
            query.append(("limit", limit))
        if continue_token:
            query.append(("continue", continue_token))
        return await self.client.request(
            "GET", self.kind.path(namespace=namespace), query=query, timeout=timeout, verb="list"
        )

    async def create(self, body: JSON, *, namespace: str | None = None,
                     verb: str = "create") -> JSON:
        return await self.client.request(
            "POST", self.kind.path(namespace=namespace), body=body, verb=verb
        )

    async def merge_patch(
        self,
        name: str,
        patch: JSON,
        *,
        namespace: str | None = None,
        subresource: str = "",
    ) -> JSON:
        """JSON merge patch; put `metadata.resourceVersion` in it for optimistic locking."""
        return await self.client.request(
            "PATCH",
            self.kind.path(namespace=namespace, name=name, subresource=subresource),
            body=patch,
            content_type=MERGE_PATCH,
            verb="patch",
        )

    async def apply(self, body: JSON, *, field_manager: str, force: bool = True,
                    subresource: str = "") -> JSON:
        """Server-side apply of a whole manifest (or of `subresource`, e.g. "status");
        a `metadata.resourceVersion` in it makes the apply fail with 409 when the
        object changed since."""
        metadata = body["metadata"]
        return await self.client.request(
            "PATCH",
            self.kind.path(namespace=metadata.get("namespace"), name=metadata["name"],
                           subresource=subresource),
            query=[("fieldManager", field_manager), ("force", str(force).lower())],
            body=body,
            content_type=APPLY_PATCH,
            verb="apply",
        )

    async def delete(
        self,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str = "Background",
    ) -> bool:
        """Delete (only the object with `uid`, or at `resource_version`, when given); False
        when it was already gone."""
        body: JSON = {"kind": "DeleteOptions", "apiVersion": "v1",
                      "propagationPolicy": propagation}
        preconditions = {name: value for name, value in
                         (("uid", uid), ("resourceVersion", resource_version)) if value}
        if preconditions:
            body["preconditions"] = preconditions
        try:
            await self.client.request(
                "DELETE", self.kind.path(namespace=namespace, name=name), body=body, verb="delete"
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True
