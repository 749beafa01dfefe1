"""Supervised tasks: a failure is logged and, with a restart delay, the body runs again
after that delay on the (fake) clock; closing the owner cancels and awaits every task."""

from __future__ import annotations

import asyncio
import logging

import pytest

from devkit.fakeclock import FakeClock
from dispatcher.supervision import Body, TaskOwner, guarded


async def test_a_failing_body_is_logged_and_restarted_after_the_delay(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    starts: list[float] = []
    forever = asyncio.Event()

    async def body() -> None:
        starts.append(clock.monotonic())
        if len(starts) < 3:
            raise RuntimeError(f"crash {len(starts)}")
        await forever.wait()

    task = asyncio.create_task(guarded("loop", body, clock=clock, restart_delay=5))
    await clock.advance(4.9)
    assert starts == [0.0]
    await clock.advance(10)
    assert starts == [0.0, 5.0, 10.0]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "task loop failed; restarting it", "task loop failed; restarting it"]
    assert "crash 1" in caplog.text
    task.cancel()
    await asyncio.wait([task])
    assert task.cancelled()


async def test_without_a_delay_a_failure_ends_the_task_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()

    async def body() -> None:
        raise RuntimeError("boom")

    await guarded("once", body, clock=clock)
    assert "task once failed" in caplog.text
    assert "boom" in caplog.text


async def test_owner_runs_one_task_per_name_and_close_cancels_and_awaits_them() -> None:
    clock = FakeClock()
    ended: list[str] = []

    def forever(name: str) -> Body:
        async def body() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                ended.append(name)
        return body

    owner = TaskOwner(clock=clock)
    assert owner.start_once("a", forever("a"), restart_delay=1)
    assert not owner.start_once("a", forever("a again"))
    assert owner.start_once("b", forever("b"))
    await clock.advance(0)
    assert len(owner) == 2 and owner.running("a")
    await owner.close()
    assert sorted(ended) == ["a", "b"]
    assert len(owner) == 0
    assert not [t for t in asyncio.all_tasks() if t.get_name() in ("a", "b")]
