"""The work queue runs each key at most once at a time and coalesces bursts; its delays
and backoffs are measured on a fake clock, so nothing here waits in real time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from devkit.fakeclock import FakeClock
from dispatcher.kube.workqueue import Lane, Reconciler, Result, WorkQueue


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@contextlib.asynccontextmanager
async def _running(queue: WorkQueue, reconcile: Reconciler, *, workers: int = 4
                   ) -> AsyncIterator[None]:
    """The queue's workers, running for the duration of the block."""
    task = asyncio.create_task(queue.run_workers(reconcile, workers=workers))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Recorder:
    """A reconcile that notes each key with the fake time it ran at."""

    def __init__(self, clock: FakeClock, results: list[Result] | None = None) -> None:
        self.clock = clock
        self.calls: list[tuple[str, float]] = []
        self._results = list(results or [])

    async def __call__(self, key: str) -> Result:
        self.calls.append((key, self.clock.monotonic()))
        return self._results.pop(0) if self._results else Result.done()

    @property
    def keys(self) -> list[str]:
        return [key for key, _ in self.calls]


async def test_burst_of_adds_is_processed_once(clock: FakeClock) -> None:
    queue = WorkQueue(name="t", clock=clock)
    reconcile = Recorder(clock)
    for _ in range(10):
        queue.add("a")
    queue.add("b")
    async with _running(queue, reconcile):
        await clock.advance(0)
    assert sorted(reconcile.keys) == ["a", "b"]


async def test_key_added_while_processing_runs_once_more_never_concurrently(
        clock: FakeClock) -> None:
    queue = WorkQueue(name="t", clock=clock)
    running = 0
    max_running = 0
    calls = 0
    release = asyncio.Event()

    async def reconcile(key: str) -> Result:
        nonlocal running, max_running, calls
        running += 1
        calls += 1
        max_running = max(max_running, running)
        if calls == 1:
            await release.wait()
        running -= 1
        return Result.done()

    queue.add("k")
    async with _running(queue, reconcile):
        await clock.advance(0)
        for _ in range(5):
            queue.add("k")
        release.set()
        await clock.advance(0)
    assert calls == 2
    assert max_running == 1


async def test_delayed_add_waits_its_delay_and_the_earliest_wins(clock: FakeClock) -> None:
    queue = WorkQueue(name="t", clock=clock)
    reconcile = Recorder(clock)
    queue.add_after("late", 10)
    queue.add_after("late", 2)
    queue.add_after("late", 5)  # later than the one queued: ignored
    assert len(queue) == 1
    async with _running(queue, reconcile):
        await clock.advance(1.9)
        assert reconcile.calls == []
        await clock.advance(0.1)
        assert reconcile.calls == [("late", 2.0)]
        await clock.advance(60)
    assert reconcile.calls == [("late", 2.0)]
    assert len(queue) == 0


async def test_delayed_add_made_while_the_timer_sleeps_wakes_it_earlier(
        clock: FakeClock) -> None:
    queue = WorkQueue(name="t", clock=clock)
    reconcile = Recorder(clock)
    async with _running(queue, reconcile):
        queue.add_after("slow", 30)
        await clock.advance(1)
        queue.add_after("quick", 1)
        await clock.advance(1)
        assert reconcile.calls == [("quick", 2.0)]
        await clock.advance(28)
    assert reconcile.calls == [("quick", 2.0), ("slow", 30.0)]


async def test_requeue_after_runs_the_key_again_then(clock: FakeClock) -> None:
    queue = WorkQueue(name="t", clock=clock)
    reconcile = Recorder(clock, [Result.after(7)])
    queue.add("k")
    async with _running(queue, reconcile):
        await clock.advance(6.9)
        assert reconcile.calls == [("k", 0.0)]
        await clock.advance(0.1)
    assert reconcile.calls == [("k", 0.0), ("k", 7.0)]


async def test_failures_back_off_exponentially_per_key_and_success_forgets(
        clock: FakeClock) -> None:
    queue = WorkQueue(name="t", clock=clock, backoff_base_seconds=1, backoff_max_seconds=5)
    attempts: dict[str, list[float]] = {"failing": [], "healthy": []}

    async def reconcile(key: str) -> Result:
        attempts[key].append(clock.monotonic())
        if key == "failing" and len(attempts[key]) < 5:
            raise RuntimeError("transient")
        return Result.done()

    queue.add("failing")
    queue.add("healthy")
    async with _running(queue, reconcile):
        await clock.advance(100)
    # Retried after 1, 2, 4, then 5 (the cap) seconds; the other key is not held up.
    assert attempts["failing"] == [0.0, 1.0, 3.0, 7.0, 12.0]
    assert attempts["healthy"] == [0.0]
    assert queue.failures("failing") == 0


async def test_retry_result_backs_off_like_a_failure(clock: FakeClock) -> None:
    queue = WorkQueue(name="t", clock=clock, backoff_base_seconds=0.5)
    reconcile = Recorder(clock, [Result.retry(), Result.retry()])
    queue.add("k")
    async with _running(queue, reconcile):
        await clock.advance(10)
    assert reconcile.calls == [("k", 0.0), ("k", 0.5), ("k", 1.5)]
    assert queue.failures("k") == 0


async def test_earlier_lanes_go_first_and_each_key_runs_once(clock: FakeClock) -> None:
    queue = WorkQueue(name="t", clock=clock)
    reconcile = Recorder(clock)
    for index in range(5):
        queue.add(f"new-{index}")
    queue.add("placed-1", lane=Lane.PROMPT)
    queue.add("status-1", lane=Lane.URGENT)
    queue.add("new-3", lane=Lane.URGENT)  # already waiting: moves to the urgent lane
    queue.add("new-4", lane=Lane.PROMPT)  # behind placed-1 in its new lane
    queue.add("status-1")  # already urgent: stays there
    queue.add("placed-1")
    assert len(queue) == 7
    async with _running(queue, reconcile, workers=1):
        await clock.advance(0)
    assert reconcile.keys == ["status-1", "new-3", "placed-1", "new-4", "new-0", "new-1",
                              "new-2"]
    assert len(queue) == 0


async def test_urgency_of_a_key_added_while_processing_is_kept(clock: FakeClock) -> None:
    queue = WorkQueue(name="t", clock=clock)
    order: list[str] = []
    release = asyncio.Event()

    async def reconcile(key: str) -> Result:
        order.append(key)
        if len(order) == 1:
            await release.wait()
        return Result.done()

    queue.add("running")
    async with _running(queue, reconcile, workers=1):
        await clock.advance(0)
        queue.add("new")
        queue.add("running", lane=Lane.URGENT)
        release.set()
        await clock.advance(0)
    assert order == ["running", "running", "new"]


async def test_idle_means_nothing_ready_and_nothing_running_though_keys_may_be_due_later(
        clock: FakeClock) -> None:
    queue = WorkQueue(name="test", clock=clock)
    release = asyncio.Event()

    async def slow(key: str) -> Result:
        await release.wait()
        return Result.after(30)

    assert queue.idle()
    queue.add("a")
    assert not queue.idle()
    async with _running(queue, slow, workers=1):
        await asyncio.sleep(0)
        assert not queue.idle()  # being reconciled
        release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert queue.idle() and len(queue) == 1  # due again in 30 s, idle meanwhile


async def test_each_key_tells_how_long_it_waited_and_in_which_lane(clock: FakeClock) -> None:
    waits: list[tuple[Lane, float]] = []
    queue = WorkQueue(name="t", clock=clock, on_wait=lambda lane, s: waits.append((lane, s)))
    queue.add("new")
    await clock.advance(3)
    queue.add("news", lane=Lane.URGENT)
    queue.add("new", lane=Lane.PROMPT)  # moved to an earlier lane: waits since its first add
    await clock.advance(2)
    async with _running(queue, Recorder(clock), workers=1):
        await clock.advance(0)
    assert waits == [(Lane.URGENT, 2.0), (Lane.PROMPT, 5.0)]
