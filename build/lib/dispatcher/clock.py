"""The clocks the controllers read and the waits they make, behind one injectable object.

`monotonic()` measures intervals (backoffs, latencies, how long a job waited);
`time()` is wall-clock seconds, for what is written to or read from the clusters (when
a worker was lost, persisted in its status). `sleep(seconds)` and `wait(event, timeout)`
are the waits whose length a test wants to control: the work queue's delayed adds, the
probe interval, the periods of the loops and the restart delay of a supervised task.
Decisions never read the clock themselves: the snapshot carries the time it was read, so
tests of `decide` set the time they want; other tests pass `devkit.fakeclock.FakeClock`,
which moves only when told.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def time(self) -> float: ...

    async def sleep(self, seconds: float) -> None:
        """Return after `seconds` of this clock."""

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        """Return once `event` is set or after `timeout` seconds of this clock (never, when
        None), whichever comes first; whether the event is set."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
        return event.is_set()
