"""Pure Python stand-ins for the unit tests: a cluster client and caches filled by hand.

`FakeClient` has the methods of `ClusterClient` that the controllers call (`request`,
`stream`, `close`), answers from a dictionary of objects by path and notes every
request; its watch streams never deliver anything. `cache` is an `Informer` that is never
run: its store is set by the test and it counts as synced. No API server, no sockets.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import Resource, ResourceKind

JSON = dict[str, Any]


@dataclass(frozen=True)
class Request:
    verb: str
    path: str
    body: Any


class FakeClient:
    def __init__(self, name: str = "fake") -> None:
        self.name = name
        self.settings = ClientSettings()
        self.objects: dict[str, JSON] = {}
        """What GET answers, by path; DELETE removes from it."""
        self.errors: dict[str, BaseException] = {}
        """An error to raise for every request of a verb ("probe", "get", "patch", ...)."""
        self.requests: list[Request] = []
        self.closed = False

    def as_client(self) -> ClusterClient:
        return cast(ClusterClient, self)

    def made(self, verb: str) -> list[Request]:
        return [r for r in self.requests if r.verb == verb]

    async def request(self, method: str, path: str, *, query: Any = None, body: Any = None,
                      content_type: str | None = None, timeout: float | None = None,
                      verb: str | None = None) -> JSON:
        verb = verb or method.lower()
        self.requests.append(Request(verb, path, body))
        if verb in self.errors:
            raise self.errors[verb]
        if verb == "list":
            return {"items": [], "metadata": {"resourceVersion": "1"}}
        if verb == "get":
            if path not in self.objects:
                raise ApiException(status=404, reason="Not Found")
            return self.objects[path]
        if verb == "delete":
            if self.objects.pop(path, None) is None:
                raise ApiException(status=404, reason="Not Found")
            return {}
        return body if isinstance(body, dict) else {}

    async def stream(self, path: str, *, query: Any, timeout: Any) -> Any:
        """A watch on which nothing ever happens."""
        await asyncio.Event().wait()

    async def close(self) -> None:
        self.closed = True


def cache(kind: ResourceKind, objects: dict[str, JSON] | None = None, *,
          namespace: str | None = None) -> Informer:
    """A synced cache of `kind` holding `objects` (by namespace/name), never run."""
    informer = Informer(Resource(FakeClient().as_client(), kind), namespace=namespace)
    informer.store = dict(objects or {})
    informer.synced.set()
    return informer
