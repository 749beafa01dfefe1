"""The two clocks the controllers read, behind one injectable object.

`monotonic()` measures intervals (backoffs, latencies, how long a job waited);
`time()` is wall-clock seconds, for what is written to or read from the clusters (when
a worker was lost, persisted in its status). Decisions never read it themselves: the
snapshot carries the time it was read, so tests of `decide` set the time they want.
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

