"""The scheduling loop: no pass before the ledger is rebuilt, a burst of triggers is one
pass, a placement is booked at once (a reservation) and a waiting job's decision is
reported only when it changes. The loop reads no clock: `settle` only lets it run."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import AsyncIterator
from fractions import Fraction

import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from devkit.fakeclock import settle
from dispatcher.api import constants as c
from dispatcher.controllers.scheduling import SchedulingLoop, VerdictTimes
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
        self.wall = 1000.0
        self.decisions: list[Decision] = []
        self.loop = SchedulingLoop(
            ledger=self.ledger, workers=self._workers, policy=PlacementPolicy.MOST_FREE,
            strategy=QueueingStrategy.BEST_EFFORT_FIFO, on_decision=self.decisions.append,
            wall=lambda: self.wall)

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


_WHY = ("lacks runtime torch", "has no GPUs")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(
    st.sampled_from(["submit", "withdraw", "pass"]), st.sampled_from(["j1", "j2", "j3", "j4"]),
    st.dictionaries(st.sampled_from(["w1", "w2"]), st.sampled_from(_WHY), max_size=2),
    st.integers(1, 9))))
def test_missing_runtimes_count_the_pending_jobs_as_a_full_scan_would(
        steps: list[tuple[str, str, dict[str, str], int]]) -> None:
    s = Setup()
    s.loop.ready.set()
    for step, uid, missing, cpu in steps:
        if step == "submit":
            s.loop.submit(dataclasses.replace(_job(uid, cpu), missing_on=missing))
        elif step == "withdraw":
            s.loop.withdraw(uid)
        else:
            s.loop.run_pass()
        for worker in ("w1", "w2"):
            scan = collections.Counter(job.missing_on[worker] for job in s.loop.pending.values()
                                       if worker in job.missing_on)
            assert s.loop.missing_runtimes(worker) == [
                f"{why} (needed by {n} pending job{'s' if n > 1 else ''})"
                for why, n in sorted(scan.items())]


async def test_a_waiting_verdict_keeps_when_it_began_and_when_the_wait_began(
        setup: Setup) -> None:
    """What the reconciler's quiet period is measured from: a new message restarts the
    verdict's time, not the wait's; a placement ends both."""
    setup.loop.ready.set()
    setup.loop.submit(_job("j1", 6))
    setup.loop.submit(_job("j2", 6))
    await settle()
    assert setup.loop.verdict_times["j2"] == VerdictTimes(since=1000.0, waiting_since=1000.0)
    setup.wall = 1005.0
    setup.loop.trigger()  # the same verdict: its time stays
    await settle()
    assert setup.loop.verdict_times["j2"].since == 1000.0
    setup.cpu = 7  # "best: w1 with 1" instead of 2: a new message
    setup.loop.trigger()
    await settle()
    assert setup.loop.verdict_times["j2"] == VerdictTimes(since=1005.0, waiting_since=1000.0)
    setup.loop.withdraw("j1")
    await settle()
    assert setup.reported()[-1] == ("j2", "w1", c.REASON_PLACED)
    assert "j2" not in setup.loop.verdict_times
