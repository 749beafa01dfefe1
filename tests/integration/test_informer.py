"""The list+watch cache against a real API server: what reaches its handlers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from devkit.factories import trainjob
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import ADDED, MODIFIED, Informer
from dispatcher.kube.resource import Resource
from tests.integration.conftest import eventually

pytestmark = pytest.mark.integration


async def test_own_remembered_writes_are_not_emitted_again_but_others_are(
    admin_clients: dict[str, ClusterClient], namespace: str, runtime_installed: dict[str, Any]
) -> None:
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    informer = Informer(jobs, namespace=namespace)
    seen: list[tuple[str, str, str]] = []

    def on_event(event_type: str, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        seen.append((event_type, metadata["name"], metadata["resourceVersion"]))

    informer.add_handler(on_event)
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(10):
            await informer.synced.wait()
        created = await jobs.create(trainjob("echo", namespace), namespace=namespace)
        await eventually(lambda: _async(("ADDED", "echo", created["metadata"]["resourceVersion"])
                                        in seen))

        # Whether the watch event or the write's answer comes first is up to the network;
        # an echo not yet emitted when its write is remembered must never be emitted.
        remembered_first: list[str] = []
        for attempt in range(20):
            mine = await jobs.merge_patch(
                "echo", {"metadata": {"labels": {"by": f"me-{attempt}"}}}, namespace=namespace)
            version = mine["metadata"]["resourceVersion"]
            if (MODIFIED, "echo", version) not in seen:
                remembered_first.append(version)
            informer.remember(mine)
            assert informer.get(f"{namespace}/echo") is mine
        theirs = await jobs.merge_patch("echo", {"metadata": {"labels": {"by": "them"}}},
                                        namespace=namespace)
        await eventually(lambda: _async(
            (MODIFIED, "echo", theirs["metadata"]["resourceVersion"]) in seen))

        assert remembered_first, "no write was answered before its watch event"
        emitted = {rv for event_type, _, rv in seen if event_type == MODIFIED}
        assert not emitted & set(remembered_first)
        cached = informer.get(f"{namespace}/echo")
        assert cached is not None and cached["metadata"]["labels"]["by"] == "them"
        assert [e for e, _, _ in seen].count(ADDED) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _async(value: bool) -> bool:
    return value


async def test_no_echo_is_kept_for_a_write_the_watch_told_first(
    admin_clients: dict[str, ClusterClient], namespace: str, runtime_installed: dict[str, Any]
) -> None:
    """An answer that comes after its own watch event awaits no echo: before, each such
    write left one behind for good (one per queued job of a long queue)."""
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    informer = Informer(jobs, namespace=namespace)
    seen: set[str] = set()
    informer.add_handler(lambda event_type, obj: seen.add(obj["metadata"]["resourceVersion"]))
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(10):
            await informer.synced.wait()
        await jobs.create(trainjob("late", namespace), namespace=namespace)
        told_first = 0
        for attempt in range(10):
            mine = await jobs.merge_patch(
                "late", {"metadata": {"labels": {"by": f"me-{attempt}"}}}, namespace=namespace)
            version = mine["metadata"]["resourceVersion"]
            await eventually(lambda v=version: _async(v in seen))  # the watch tells it first
            informer.remember(mine)
            told_first += 1
        assert told_first == 10
        assert not informer._echoes.get(f"{namespace}/late")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
