"""The scheduling loop: no pass before the ledger is rebuilt, a burst of triggers is one
pass, a placement is booked at once (a reservation) and a waiting job's decision is
reported only when it changes. The loop reads no clock: `settle` only lets it run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from fractions import Fraction

import pytest_asyncio

from devkit.fakeclock import settle
from dispatcher.api import constants as c
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.placement.ledger import Ledger
from dispatcher.placement.options import PlacementPolicy, QueueingStrategy
from dispatcher.placement.scheduler import Decision, PendingJob, WorkerView


def _job(uid: str, cpu: int) -> PendingJob:
    return PendingJob(key=f"ns/{uid}", uid=uid, demand={"cpu": Fraction(cpu)},
                      created=f"2026-01-01T00:00:0{uid[-1]}Z")


class Setup:
    def __init__(self) -> None:
        self.ledger = Ledger()
        self.cpu = 8
        self.passes = 0
        self.decisions: list[Decision] = []
        self.loop = SchedulingLoop(
            ledger=self.ledger, workers=self._workers, policy=PlacementPolicy.MOST_FREE,
            strategy=QueueingStrategy.BEST_EFFORT_FIFO, on_decision=self.decisions.append)

    def _workers(self) -> list[WorkerView]:
        self.passes += 1
        return [WorkerView(name="w1", quota={"cpu": Fraction(self.cpu)},
                           used=self.ledger.used("w1"))]

    def reported(self) -> list[tuple[str, str | None, str]]:
        return [(d.uid, d.worker, d.reason) for d in self.decisions]


@pytest_asyncio.fixture
async def setup() -> AsyncIterator[Setup]:
    s = Setup()
    task = asyncio.create_task(s.loop.run())
    try:
        yield s
    finally:
        task.cancel()
        await asyncio.wait([task])


async def test_nothing_is_placed_before_the_ledger_is_rebuilt(setup: Setup) -> None:
    setup.loop.submit(_job("j1", 4))
    await settle()
    assert setup.passes == 0
    setup.loop.ready.set()
    await settle()
    assert setup.reported() == [("j1", "w1", c.REASON_PLACED)]
    assert setup.loop.reservation("j1") == "w1"
    assert setup.ledger.used("w1") == {"cpu": Fraction(4)}


async def test_a_burst_of_triggers_is_one_pass_and_a_wait_is_reported_once(
        setup: Setup) -> None:
    setup.loop.ready.set()
    setup.loop.submit(_job("j1", 6))
    setup.loop.submit(_job("j2", 6))
    for _ in range(10):
        setup.loop.trigger()
    await settle()
    assert setup.passes == 1
    assert setup.reported() == [("j1", "w1", c.REASON_PLACED),
                                ("j2", None, c.REASON_WAITING_FOR_QUOTA)]
    setup.loop.trigger()
    await settle()
    assert setup.passes == 2 and len(setup.decisions) == 2  # the same wait: not reported


async def test_withdrawing_a_reservation_frees_its_quota_for_the_next_pass(
        setup: Setup) -> None:
    setup.loop.ready.set()
    setup.loop.submit(_job("j1", 6))
    setup.loop.submit(_job("j2", 6))
    await settle()
    setup.loop.withdraw("j1")
    await settle()
    assert setup.ledger.get("j1") is None
    assert setup.reported()[-1] == ("j2", "w1", c.REASON_PLACED)
