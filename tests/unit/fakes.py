"""Pure Python stand-ins for the unit tests: a cluster client and caches filled by hand.

`FakeClient` has the methods of `ClusterClient` that the controllers call (`request`,
`stream`, `close`), answers from a dictionary of objects by path and notes every
request; its watch streams never deliver anything. `cache` is an `Informer` that is never
run: its store is set by the test and it counts as synced. `connection_options` and
`worker` make worker connections on a given clock (`worker` one that is never opened,
whose state the test sets), and `FakeRegistry` holds them (found by name with `get`).
No API server, no sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api.workercluster import WorkerSpec
from dispatcher.clock import Clock
from dispatcher.controllers.workers import ConnectionOptions, WorkerConnection
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.informer import Informer, InformerSettings
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
        self.lists: dict[str, list[JSON]] = {}
        """What LIST answers, by path (no items for any other)."""
        self.script: dict[str, list[BaseException | JSON]] = {}
        """Answers to the next requests of a verb, in order, before any of the above: an
        exception is raised, an object returned."""
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
        if self.script.get(verb):
            answer = self.script[verb].pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        if verb in self.errors:
            raise self.errors[verb]
        if verb == "list":
            return {"items": list(self.lists.get(path, [])), "metadata": {"resourceVersion": "1"}}
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
          namespace: str | None = None, client: FakeClient | None = None) -> Informer:
    """A synced cache of `kind` holding `objects` (by namespace/name), never run; writes
    through it go to `client`."""
    informer = Informer(Resource((client or FakeClient()).as_client(), kind),
                        namespace=namespace)
    informer.store = dict(objects or {})
    informer.synced.set()
    return informer


def connection_options(clock: Clock, *, probe_interval: float = 10.0) -> ConnectionOptions:
    return ConnectionOptions(
        client_settings=ClientSettings(), informer_settings=InformerSettings(),
        kind=TrainJobKind(), origin="test", probe_interval=probe_interval,
        on_change=lambda worker: None, observer=lambda *_: None, clock=clock)


def worker(name: str, clock: Clock, *, active: bool = True) -> WorkerConnection:
    """A connection that is never opened: the test sets its state."""
    connection = WorkerConnection(spec=WorkerSpec(name=name, kubeconfig={}),
                                  options=connection_options(clock),
                                  on_mirror_event=lambda event_type, obj: None)
    connection.active = active
    connection.reason = c.REASON_CONNECTED if active else c.REASON_UNREACHABLE
    connection.message = "connected" if active else "unreachable"
    return connection


class FakeRegistry:
    """The registry's `workers`; `apply` only notes which workers it was given."""

    def __init__(self, *workers: WorkerConnection) -> None:
        self.workers = {w.name: w for w in workers}
        self.applied: list[list[str]] = []

    def get(self, name: str) -> WorkerConnection | None:
        return self.workers.get(name)

    async def apply(self, specs: Iterable[WorkerSpec],
                    lost_since: dict[str, float] | None = None) -> None:
        self.applied.append([spec.name for spec in specs])
