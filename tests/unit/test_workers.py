"""A worker connection's probe and tasks, on a fake clock over a fake client.

The connection is opened over `FakeClient` (its lists are empty, its watches quiet), so
its caches sync at once and the probe alone decides whether the worker is active.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.fakeclock import FakeClock
from dispatcher.api import constants as c
from dispatcher.api.workercluster import WorkerSpec
from dispatcher.controllers.workers import WorkerConnection
from tests.unit.fakes import FakeClient, connection_options

PROBE_INTERVAL = 10.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def client() -> FakeClient:
    return FakeClient("w1")


@pytest_asyncio.fixture
async def worker(clock: FakeClock, client: FakeClient) -> AsyncIterator[WorkerConnection]:
    connection = WorkerConnection(
        spec=WorkerSpec(name="w1", kubeconfig={}),
        options=connection_options(clock, probe_interval=PROBE_INTERVAL),
        on_mirror_event=lambda event_type, obj: None)
    connection.open(client.as_client())
    await clock.advance(0)
    try:
        yield connection
    finally:
        await connection.stop()


def _probes(client: FakeClient) -> int:
    return len(client.made("probe"))


async def test_an_answering_worker_is_active_and_probed_every_interval(
        worker: WorkerConnection, client: FakeClient, clock: FakeClock) -> None:
    assert (worker.active, worker.reason) == (True, c.REASON_CONNECTED)
    assert worker.last_probe == clock.time()
    probes = _probes(client)
    await clock.advance(PROBE_INTERVAL - 0.1)
    assert _probes(client) == probes
    await clock.advance(0.1)
    assert _probes(client) == probes + 1
    assert worker.last_probe == clock.time()
    await clock.advance(3 * PROBE_INTERVAL)
    assert _probes(client) == probes + 4


async def test_a_failing_probe_makes_the_worker_inactive_and_lost_since_it_was_sent(
        worker: WorkerConnection, client: FakeClient, clock: FakeClock) -> None:
    await clock.advance(5)
    client.errors["probe"] = TimeoutError()
    await clock.advance(PROBE_INTERVAL - 5)
    lost_at = clock.time()
    assert (worker.active, worker.reason) == (False, c.REASON_UNREACHABLE)
    assert worker.lost_since == lost_at
    await clock.advance(3 * PROBE_INTERVAL)
    assert worker.lost_since == lost_at  # from the first failure, not the latest
    del client.errors["probe"]
    await clock.advance(PROBE_INTERVAL)
    assert (worker.active, worker.lost_since) == (True, None)


@pytest.mark.parametrize(("status", "reason", "lost"), [
    (401, c.REASON_UNAUTHORIZED, True),
    (503, c.REASON_UNREACHABLE, True),
    (404, c.REASON_MISSING_CRD, False),
])
async def test_only_a_network_loss_starts_the_lost_clock(
        worker: WorkerConnection, client: FakeClient, clock: FakeClock,
        status: int, reason: str, lost: bool) -> None:
    client.errors["probe"] = ApiException(status=status, reason="refused")
    await clock.advance(PROBE_INTERVAL)
    assert (worker.active, worker.reason) == (False, reason)
    assert worker.lost_since == (clock.time() if lost else None)


async def test_a_probe_that_raises_is_logged_makes_the_worker_inactive_and_is_restarted(
        worker: WorkerConnection, client: FakeClient, clock: FakeClock,
        caplog: pytest.LogCaptureFixture) -> None:
    probe = worker.probe
    crashes = 0

    async def crashing() -> None:
        nonlocal crashes
        if crashes < 2:
            crashes += 1
            raise RuntimeError("a bug in the probe")
        await probe()

    worker.probe = crashing  # type: ignore[method-assign]
    await clock.advance(PROBE_INTERVAL)
    assert (worker.active, worker.reason) == (False, c.REASON_PROBE_FAILED)
    assert "RuntimeError: a bug in the probe" in worker.message
    assert "task worker/w1/probe failed; restarting it" in [
        r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    await clock.advance(1)  # restarted after a second, fails once more
    assert (worker.active, crashes) == (False, 2)
    await clock.advance(1)
    assert (worker.active, worker.reason) == (True, c.REASON_CONNECTED)


async def test_stop_cancels_and_awaits_every_task_and_closes_the_client(
        worker: WorkerConnection, client: FakeClient) -> None:
    def tasks() -> list[str]:
        return sorted(t.get_name() for t in asyncio.all_tasks()
                      if t.get_name().startswith("worker/w1/"))

    assert tasks() == ["worker/w1/probe", "worker/w1/watch-clustertrainingruntimes",
                       "worker/w1/watch-mirrors", "worker/w1/watch-trainingruntimes"]
    await worker.stop()
    assert tasks() == []
    assert client.closed and worker.client is None
