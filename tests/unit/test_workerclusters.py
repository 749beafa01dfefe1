"""The WorkerCluster status controller on a fake clock: a status is written when it
changes, its last probe time refreshed once a minute and not before, and the loop writes
every two seconds without events and applies registrations at once on a change."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from devkit.fakeclock import FakeClock
from dispatcher.api import constants as c
from dispatcher.api.workercluster import WORKER_CLUSTERS
from dispatcher.config import DispatcherConfig
from dispatcher.controllers.status import rfc3339
from dispatcher.controllers.workerclusters import WorkerClustersController
from dispatcher.placement.capacity import Capacity
from tests.unit.fakes import FakeClient, FakeRegistry, cache, worker

JSON = dict[str, Any]
SINCE = "2025-01-01T00:00:00Z"


class Setup:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.client = FakeClient("manager")
        self.worker = worker("w1", self.clock)
        self.worker.last_probe = self.clock.time()
        self.registry = FakeRegistry(self.worker)
        registered: JSON = {
            "metadata": {"name": "w1"}, "spec": {},
            "status": {"conditions": [{"type": c.CONDITION_ACTIVE, "status": "True",
                                       "lastTransitionTime": SINCE}]}}
        self.controller = WorkerClustersController(
            config=DispatcherConfig(), registry=self.registry,  # type: ignore[arg-type]
            capacity_of=lambda w: Capacity(quota=None),
            worker_clusters=cache(WORKER_CLUSTERS, {"w1": registered}, client=self.client),
            secrets=None, clock=self.clock)

    def statuses(self) -> list[JSON]:
        return [r.body["status"] for r in self.client.made("patch")]


@pytest.fixture
def setup() -> Setup:
    return Setup()


async def test_status_is_written_once_then_only_its_probe_time_after_a_minute(
        setup: Setup) -> None:
    clock, w = setup.clock, setup.worker
    await setup.controller.write_statuses()
    [first] = setup.statuses()
    assert first["lastProbeTime"] == rfc3339(clock.time())
    assert first["conditions"] == [{"type": c.CONDITION_ACTIVE, "status": "True",
                                    "reason": c.REASON_CONNECTED, "message": "connected",
                                    "lastTransitionTime": SINCE}]
    for _ in range(5):
        await clock.advance(10)
        w.last_probe = clock.time()
        await setup.controller.write_statuses()
    assert len(setup.statuses()) == 1
    await clock.advance(10.5)  # a minute and a half-second after the first write
    w.last_probe = clock.time()
    await setup.controller.write_statuses()
    assert [s["lastProbeTime"] for s in setup.statuses()] == [
        first["lastProbeTime"], rfc3339(clock.time())]


async def test_a_change_is_written_at_once_with_the_time_the_worker_was_lost(
        setup: Setup) -> None:
    clock, w = setup.clock, setup.worker
    await setup.controller.write_statuses()
    await clock.advance(30)
    w.active, w.reason, w.message = False, c.REASON_UNREACHABLE, "unreachable"
    w.lost_since = clock.time() - 5
    await setup.controller.write_statuses()
    [condition] = setup.statuses()[-1]["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", c.REASON_UNREACHABLE)
    assert condition["lastTransitionTime"] == rfc3339(clock.time() - 5)


async def test_a_transition_without_a_loss_is_dated_by_the_clock(setup: Setup) -> None:
    clock, w = setup.clock, setup.worker
    await clock.advance(100)
    w.active, w.reason, w.message = False, c.REASON_MISSING_CRD, "no TrainJob CRD"
    await setup.controller.write_statuses()
    [condition] = setup.statuses()[-1]["conditions"]
    assert condition["lastTransitionTime"] == rfc3339(clock.time())


async def test_the_loop_writes_every_two_seconds_and_applies_registrations_on_a_change(
        setup: Setup) -> None:
    clock, w = setup.clock, setup.worker
    task = asyncio.create_task(setup.controller.run())
    try:
        await clock.advance(0)
        assert len(setup.statuses()) == 1 and setup.registry.applied == []
        w.message = "connected; still"
        await clock.advance(1.9)
        assert len(setup.statuses()) == 1
        await clock.advance(0.1)
        assert setup.statuses()[-1]["conditions"][0]["message"] == "connected; still"
        setup.controller.trigger()
        await clock.advance(0)
        assert setup.registry.applied == [["w1"]]
    finally:
        task.cancel()
        await asyncio.wait([task])
