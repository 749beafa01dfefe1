"""`WorkerRegistry.apply` as the registrations change (a Secret rotated, removed, a
label edited, a worker unregistered), over fake clients on a fake clock: only a change
of what the connection is made of reconnects, the old client is closed and its mirror
cache dropped, and the lost-since clock survives the reconnection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from devkit.fakeclock import FakeClock, settle
from dispatcher.api import constants as c
from dispatcher.api.workercluster import ConfigProblem, WorkerSpec
from dispatcher.controllers.workers import WorkerRegistry
from dispatcher.kube.client import ClusterClient
from tests.unit.fakes import FakeClient, connection_options


class Built:
    """The fake clients the registry built, by the server their kubeconfig names."""

    def __init__(self) -> None:
        self.clients: list[tuple[str, FakeClient]] = []
        self.unreachable: set[str] = set()

    async def from_kubeconfig(self, *, name: str, kubeconfig: dict[str, Any],
                              **_: Any) -> ClusterClient:
        client = FakeClient(name)
        if kubeconfig["server"] in self.unreachable:
            client.errors["probe"] = aiohttp.ClientConnectionError("connection refused")
        self.clients.append((kubeconfig["server"], client))
        return client.as_client()


def spec(name: str, server: str, **fields: Any) -> WorkerSpec:
    return WorkerSpec(name=name, kubeconfig={"server": server}, **fields)


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Built:
    built = Built()
    monkeypatch.setattr(ClusterClient, "from_kubeconfig", built.from_kubeconfig)
    return built


@pytest_asyncio.fixture
async def setup(built: Built) -> AsyncIterator[tuple[WorkerRegistry, list[str]]]:
    resets: list[str] = []
    registry = WorkerRegistry(options=connection_options(FakeClock()),
                              on_mirror_event=lambda *_: None, on_mirrors_reset=resets.append)
    yield registry, resets
    await registry.close()


async def test_a_rotated_secret_reconnects_closing_the_old_client_and_keeping_lost_since(
        built: Built, setup: tuple[WorkerRegistry, list[str]]) -> None:
    """The worker was lost before (its clock is on the WorkerCluster's status) and is
    still unreachable: the new credentials do not restart the clock that decides when
    its jobs are evicted."""
    registry, resets = setup
    built.unreachable = {"https://old", "https://new"}
    await registry.apply([spec("a", "https://old")], lost_since={"a": 42.0})
    first = registry.workers["a"]
    assert [server for server, _ in built.clients] == ["https://old"]
    assert first.lost_since == 42.0

    await registry.apply([spec("a", "https://new")])
    await settle()
    second = registry.workers["a"]
    assert second is not first and second.lost_since == 42.0
    assert [server for server, _ in built.clients] == ["https://old", "https://new"]
    assert built.clients[0][1].closed and not built.clients[1][1].closed
    assert first.client is None and resets == ["a"]


async def test_a_change_of_labels_or_cordon_keeps_the_connection(
        built: Built, setup: tuple[WorkerRegistry, list[str]]) -> None:
    registry, resets = setup
    await registry.apply([spec("a", "https://one")])
    connection = registry.workers["a"]
    await registry.apply([spec("a", "https://one", labels={"zone": "x"}, cordoned=True)])
    assert registry.workers["a"] is connection
    assert connection.spec.labels == {"zone": "x"} and connection.spec.cordoned
    assert len(built.clients) == 1 and resets == []


async def test_a_removed_secret_closes_the_client_and_says_why_on_the_worker(
        built: Built, setup: tuple[WorkerRegistry, list[str]]) -> None:
    registry, resets = setup
    await registry.apply([spec("a", "https://one")])
    missing = ConfigProblem(c.REASON_SECRET_NOT_FOUND, "Secret ns/a-kubeconfig not found")
    await registry.apply([WorkerSpec(name="a", kubeconfig=None, problem=missing)])
    connection = registry.workers["a"]
    assert built.clients[0][1].closed and connection.client is None
    assert (connection.active, connection.reason, connection.message) == (
        False, c.REASON_SECRET_NOT_FOUND, "Secret ns/a-kubeconfig not found")
    assert resets == ["a"]
    await registry.apply([spec("a", "https://one")])  # restored: connected anew
    assert registry.workers["a"].client is not None and len(built.clients) == 2


async def test_an_unregistered_worker_is_stopped_and_forgotten(
        built: Built, setup: tuple[WorkerRegistry, list[str]]) -> None:
    registry, resets = setup
    await registry.apply([spec("a", "https://a"), spec("b", "https://b")])
    await registry.apply([spec("b", "https://b")])
    assert list(registry.workers) == ["b"] and resets == ["a"]
    assert [client.closed for _, client in built.clients] == [True, False]


async def test_concurrent_applies_never_leave_two_connections_for_one_worker(
        built: Built, setup: tuple[WorkerRegistry, list[str]]) -> None:
    registry, _ = setup
    await asyncio.gather(*(registry.apply([spec("a", f"https://{i}")]) for i in range(5)))
    open_clients = [client for _, client in built.clients if not client.closed]
    assert len(open_clients) == 1
    assert registry.workers["a"].client is open_clients[0].as_client()
