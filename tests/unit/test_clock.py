"""The fake clock moves only when told and wakes sleepers in deadline order; both clocks
answer `wait` the same way."""

from __future__ import annotations

import asyncio

from devkit.fakeclock import FakeClock
from dispatcher.clock import SystemClock


async def test_sleepers_wake_in_deadline_order_and_only_when_time_is_advanced() -> None:
    clock = FakeClock(start=1000.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float, again: float = 0) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.monotonic()))
        if again:
            await clock.sleep(again)
            woke.append((name, clock.monotonic()))

    tasks = [asyncio.create_task(sleeper("a", 5, again=2)), asyncio.create_task(sleeper("b", 3))]
    await clock.advance(0)
    assert woke == [] and clock.sleepers() == 2
    await clock.advance(10)
    assert woke == [("b", 3.0), ("a", 5.0), ("a", 7.0)]
    assert (clock.monotonic(), clock.time()) == (10.0, 1010.0)
    await asyncio.gather(*tasks)


async def test_wait_returns_when_the_event_is_set_or_the_timeout_passes() -> None:
    clock = FakeClock()
    event = asyncio.Event()
    waiting = asyncio.create_task(clock.wait(event, 10))
    await clock.advance(9.9)
    assert not waiting.done()
    event.set()
    await clock.advance(0)
    assert waiting.result() is True
    assert clock.sleepers() == 0
    event.clear()
    timing_out = asyncio.create_task(clock.wait(event, 10))
    await clock.advance(10)
    assert timing_out.result() is False


async def test_the_system_clock_waits_alike_without_sleeping() -> None:
    event = asyncio.Event()
    assert await SystemClock().wait(event, 0) is False
    event.set()
    assert await SystemClock().wait(event, 0) is True
    assert await FakeClock().wait(event, 0) is True
