"""The informer's own writes: the watch events of writes this process `remember`ed are
not emitted again, even when they arrive after later writes of the same object, and a
watch event older than the cached object never takes the cache back to it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from devkit.fakeclock import FakeClock, settle
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import Resource
from tests.unit.test_informer_relist import WatchingClient, listed, obj


class GatedClient(WatchingClient):
    """Opens its watches only once `gate` is set: the test writes first."""

    def __init__(self, watches: list[list[dict[str, Any]] | BaseException]) -> None:
        super().__init__(watches)
        self.gate = asyncio.Event()

    async def stream(self, path: str, *, query: Any, timeout: Any) -> Any:
        await self.gate.wait()
        return await super().stream(path, query=query, timeout=timeout)


def labelled(version: str, label: str) -> dict[str, Any]:
    body = obj("a", version)
    body["metadata"]["labels"] = {"by": label}
    return body


async def test_remembered_writes_are_not_emitted_in_any_order_and_the_cache_never_regresses(
) -> None:
    client = GatedClient([[
        {"type": "MODIFIED", "object": labelled("2", "me")},      # echo of the first write
        {"type": "MODIFIED", "object": labelled("4", "them")},    # someone else's
        {"type": "MODIFIED", "object": labelled("3", "me")},      # a late echo
        {"type": "MODIFIED", "object": labelled("6", "me")},      # echo of a later write
        {"type": "MODIFIED", "object": labelled("5", "them")},    # older than the cache
    ]])
    client.script["list"] = [listed("1", obj("a", "1"))]
    informer = Informer(Resource(client.as_client(), TRAINJOBS), clock=FakeClock())
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, o: seen.append((kind, o["metadata"]["resourceVersion"])))
    task = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        informer.remember(labelled("2", "me"))
        informer.remember(labelled("3", "me"))
        informer.remember(labelled("6", "me"))
        client.gate.set()
        for _ in range(100):
            await settle()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen == [("ADDED", "1"), ("MODIFIED", "6"), ("MODIFIED", "6")], (
        "each of the others' changes is told, with the newest object (ours, remembered "
        "before their events came); ours never")
    assert informer.get("ns/a")["metadata"]["resourceVersion"] == "6"


def test_cached_objects_share_their_keys_and_short_strings_and_drop_managed_fields() -> None:
    informer = Informer(Resource(WatchingClient([]).as_client(), TRAINJOBS), clock=FakeClock())
    long_text = "x" * 200
    for name in ("a", "b"):  # decoded apart, as two watch events are
        body = json.loads(json.dumps(labelled("2", "the-team") | {"spec": {"note": long_text}}))
        body["metadata"].update(name=name, managedFields=[{"manager": "kubectl"}])
        informer.remember(body)
        assert informer.get(f"ns/{name}") is body, "the remembered write is the cached one"
    a, b = informer.get("ns/a"), informer.get("ns/b")
    assert a is not None and b is not None
    assert a["metadata"]["labels"]["by"] is b["metadata"]["labels"]["by"]
    assert next(iter(a["metadata"])) is next(iter(b["metadata"]))
    assert a["spec"]["note"] == b["spec"]["note"] == long_text
    assert "managedFields" not in a["metadata"] and a["metadata"]["name"] == "a"


async def test_a_write_whose_watch_event_came_first_awaits_no_echo() -> None:
    """The watch may bring a write before its answer does: nothing is then kept for it
    (20,000 queued jobs each kept such an echo, never to come)."""
    client = WatchingClient([[{"type": "MODIFIED", "object": labelled("2", "me")}]])
    client.script["list"] = [listed("1", obj("a", "1"))]
    informer = Informer(Resource(client.as_client(), TRAINJOBS), clock=FakeClock())
    task = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        for _ in range(20):
            await settle()
        assert informer.get("ns/a")["metadata"]["resourceVersion"] == "2"
        answer = labelled("2", "me")
        informer.remember(answer)
        assert informer._echoes == {} and informer.get("ns/a") is answer
        informer.remember(labelled("3", "me"))
        assert informer._echoes == {"ns/a": {3}}
        assert informer.get("ns/a")["metadata"]["resourceVersion"] == "3"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
