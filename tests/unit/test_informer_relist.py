"""The informer over a fake client whose watches are scripted: after "410 Gone" (as an
ERROR event in the stream, or as the answer to opening the watch) it lists again at
once, without counting a failure or sleeping, and turns the difference between its cache
and the new list into the events its handlers missed; any other failure backs off on the
clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from devkit.fakeclock import FakeClock, settle
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import Resource
from tests.unit.fakes import FakeClient


def obj(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}}


def listed(version: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"items": list(items), "metadata": {"resourceVersion": version}}


class _Lines:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.content = self._lines(events)
        self.released = False

    async def _lines(self, events: list[dict[str, Any]]) -> AsyncIterator[bytes]:
        for event in events:
            yield json.dumps(event).encode() + b"\n"

    def release(self) -> None:
        self.released = True


class WatchingClient(FakeClient):
    """Answers each watch with the next scripted stream (or error); then waits forever."""

    def __init__(self, watches: list[list[dict[str, Any]] | BaseException]) -> None:
        super().__init__()
        self.watches = watches
        self.watched_from: list[str] = []

    async def stream(self, path: str, *, query: Any, timeout: Any) -> Any:
        self.watched_from.append(dict(query)["resourceVersion"])
        if not self.watches:
            await asyncio.Event().wait()
        answer = self.watches.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return _Lines(answer)


async def run_until(informer: Informer, client: WatchingClient, watches: int) -> None:
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(200):
            await settle()
            if len(client.watched_from) >= watches:
                break
        await settle()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_410_in_the_stream_or_on_opening_relists_at_once_and_reports_the_missed() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                        "message": "too old resource version: 5 (40)"}}
    client = WatchingClient([
        [{"type": "MODIFIED", "object": obj("a", "6")}, gone],
        ApiException(status=410, reason="Gone"),
    ])
    client.script["list"] = [
        listed("5", obj("a", "1"), obj("b", "1")),
        listed("8", obj("a", "6"), obj("c", "7")),   # b was deleted while we were gone
        listed("9", obj("a", "6"), obj("c", "9")),
    ]
    clock = FakeClock()
    informer = Informer(Resource(client.as_client(), TRAINJOBS), clock=clock)
    seen: list[tuple[str, str, str]] = []
    informer.add_handler(lambda kind, o: seen.append(
        (kind, o["metadata"]["name"], o["metadata"]["resourceVersion"])))

    await run_until(informer, client, watches=3)

    assert client.watched_from == ["5", "8", "9"]
    assert seen == [("ADDED", "a", "1"), ("ADDED", "b", "1"),
                    ("MODIFIED", "a", "6"),                        # from the stream
                    ("DELETED", "b", "1"), ("ADDED", "c", "7"),    # the first relist
                    ("MODIFIED", "c", "9")]                        # the second
    assert sorted(informer.store) == ["ns/a", "ns/c"]
    assert informer.restarts == 0 and clock.sleepers() == 0


async def test_any_other_watch_failure_is_counted_reported_and_retried_after_a_backoff(
) -> None:
    client = WatchingClient([ApiException(status=500, reason="Internal Server Error")])
    client.script["list"] = [listed("5", obj("a", "1")), listed("6", obj("a", "1"))]
    clock = FakeClock()
    reported: list[Exception | None] = []
    informer = Informer(Resource(client.as_client(), TRAINJOBS), clock=clock,
                        on_connection=reported.append)
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(50):
            await settle()
        assert informer.restarts == 1 and clock.sleepers() == 1
        assert [type(r) for r in reported] == [type(None), ApiException]
        assert len(client.made("list")) == 1  # nothing listed before the backoff ends
        await clock.advance(informer.settings.backoff_max_seconds)
        for _ in range(50):
            await settle()
        assert len(client.made("list")) == 2 and client.watched_from == ["5", "6"]
        assert reported[-1] is None  # connected again
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
