"""The work queue runs each key at most once at a time and coalesces bursts."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from dispatcher.kube.workqueue import Lane, Reconciler, Result, WorkQueue


@contextlib.asynccontextmanager
async def _running(queue: WorkQueue, reconcile: Reconciler, *, workers: int
                   ) -> AsyncIterator[None]:
    """The queue's workers, running for the duration of the block."""
    task = asyncio.create_task(queue.run_workers(reconcile, workers=workers))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _run_until(queue: WorkQueue, reconcile: Reconciler,
                     condition: Callable[[], bool], *, workers: int = 4) -> None:
    async with _running(queue, reconcile, workers=workers):
        for _ in range(200):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("condition not reached")


async def test_burst_of_adds_is_processed_once() -> None:
    queue = WorkQueue(name="t")
    seen: list[str] = []

    async def reconcile(key: str) -> Result:
        seen.append(key)
        return Result.done()

    for _ in range(10):
        queue.add("a")
    queue.add("b")
    await _run_until(queue, reconcile, lambda: len(seen) >= 2)
    await asyncio.sleep(0.05)
    assert sorted(seen) == ["a", "b"]


async def test_key_added_while_processing_runs_once_more_never_concurrently() -> None:
    queue = WorkQueue(name="t")
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
    async with _running(queue, reconcile, workers=4):
        await asyncio.sleep(0.02)
        for _ in range(5):
            queue.add("k")
        release.set()
        await asyncio.sleep(0.05)
    assert calls == 2
    assert max_running == 1


async def test_failures_back_off_and_success_forgets() -> None:
    queue = WorkQueue(name="t", backoff_base_seconds=0.01)
    attempts = 0

    async def reconcile(key: str) -> Result:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError("transient")
        return Result.done()

    queue.add("k")
    await _run_until(queue, reconcile, lambda: attempts >= 3)
    assert queue.failures("k") == 0


async def test_requeue_after_and_earliest_delay_wins() -> None:
    queue = WorkQueue(name="t")
    seen: list[str] = []

    async def reconcile(key: str) -> Result:
        seen.append(key)
        return Result.done()

    queue.add_after("late", 10)
    queue.add_after("late", 0.02)
    queue.add_after("late", 5)
    await _run_until(queue, reconcile, lambda: seen == ["late"])


async def test_earlier_lanes_go_first_and_each_key_runs_once() -> None:
    queue = WorkQueue(name="t")
    order: list[str] = []

    async def reconcile(key: str) -> Result:
        order.append(key)
        return Result.done()

    for index in range(5):
        queue.add(f"new-{index}")
    queue.add("placed-1", lane=Lane.PROMPT)
    queue.add("status-1", lane=Lane.URGENT)
    queue.add("new-3", lane=Lane.URGENT)  # already waiting: moves to the urgent lane
    queue.add("new-4", lane=Lane.PROMPT)  # behind placed-1 in its new lane
    queue.add("status-1")  # already urgent: stays there
    queue.add("placed-1")
    assert len(queue) == 7
    await _run_until(queue, reconcile, lambda: len(order) >= 7, workers=1)
    await asyncio.sleep(0.02)
    assert order == ["status-1", "new-3", "placed-1", "new-4", "new-0", "new-1", "new-2"]
    assert len(queue) == 0


async def test_urgency_of_a_key_added_while_processing_is_kept() -> None:
    queue = WorkQueue(name="t")
    order: list[str] = []
    release = asyncio.Event()

    async def reconcile(key: str) -> Result:
        order.append(key)
        if len(order) == 1:
            await release.wait()
        return Result.done()

    queue.add("running")
    async with _running(queue, reconcile, workers=1):
        await asyncio.sleep(0.02)
        queue.add("new")
        queue.add("running", lane=Lane.URGENT)
        release.set()
        await asyncio.sleep(0.05)
    assert order == ["running", "running", "new"]
