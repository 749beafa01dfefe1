"""The two clocks the controllers read, behind one injectable object.

`monotonic()` measures intervals (backoffs, latencies, how long a job waited);
`time()` is wall-clock seconds, for what is written to or read from the clusters (when
a worker was lost, persisted in its status). Tests pass a `ManualClock` and move it.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def time(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told: for tests of time-dependent decisions."""

    def __init__(self, *, start: float = 1_000_000.0) -> None:
        self._now = start

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
