"""A `Clock` for tests that moves only when the test says so.

`FakeClock` starts at monotonic 0 (wall clock `start`) and stands still: `sleep` and
`wait` register a deadline and suspend. `await clock.advance(seconds)` moves time forward
deadline by deadline, waking each sleeper whose deadline passed and letting the woken
tasks run (so a loop that sleeps again inside the window wakes again) before returning;
`await clock.advance(0)` (or `settle()`, for code with no clock) only lets ready tasks
run. Nothing here waits in real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

_SETTLE_ROUNDS = 50
"""Loop iterations given to ready tasks after each step: enough for a woken task to run
through a few awaits of futures that are already done (fake clients, queues)."""


class FakeClock:
    def __init__(self, *, start: float = 1_750_000_000.0) -> None:
        self._now = 0.0
        self._epoch = start
        self._alarms: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._epoch + self._now

    def sleepers(self) -> int:
        """How many sleeps and waits with a deadline are pending."""
        return sum(1 for _, _, alarm in self._alarms if not alarm.done())

    def _alarm(self, seconds: float) -> asyncio.Future[None]:
        alarm = asyncio.get_running_loop().create_future()
        heapq.heappush(self._alarms, (self._now + seconds, next(self._sequence), alarm))
        return alarm

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        alarm = self._alarm(seconds)
        try:
            await alarm
        finally:
            alarm.cancel()

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        if timeout is None or event.is_set():
            return await event.wait()
        if timeout <= 0:
            return False
        alarm = self._alarm(timeout)
        setting = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait((alarm, setting), return_when=asyncio.FIRST_COMPLETED)
        finally:
            alarm.cancel()
            setting.cancel()
        return event.is_set()

    async def advance(self, seconds: float) -> None:
        """Move `seconds` forward, waking the sleepers due on the way, in order."""
        target = self._now + seconds
        await settle()
        while self._alarms and self._alarms[0][0] <= target:
            due, _, alarm = heapq.heappop(self._alarms)
            self._now = max(self._now, due)
            if not alarm.done():
                alarm.set_result(None)
                await settle()
        self._now = target
        await settle()


async def settle() -> None:
    """Let the tasks that are ready run, and those they wake, a few awaits deep."""
    for _ in range(_SETTLE_ROUNDS):
        await asyncio.sleep(0)
