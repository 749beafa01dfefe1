"""A de-duplicating, delaying work queue with per-key backoff, for asyncio.

The semantics of client-go's work queue, without its locks:
- a key added while queued is queued once;
- a key added while being processed is marked dirty and processed once more after;
- a delayed add keeps the earliest due time;
- each key waits in a `Lane`, first come first served within it: `URGENT` keys go
  ahead of `PROMPT` ones, and both ahead of `ORDINARY` ones (the job controller puts
  news about running jobs first and placements that hold booked quota next, so a burst
  of new jobs holds up neither); a key added again in an earlier lane moves there;
- `run_workers` runs at most one reconcile per key at a time, with N workers;
- `on_wait(lane, seconds)` hears how long each key waited, from its add to its reconcile
  (client-go's queue duration), by the lane it was served from.

The reconcile function returns a `Result` (controller-runtime's rule): `done()` forgets
the key's backoff, `after(s)` processes it again later, `retry()` (a conflict, a
transient error) processes it again after the key's exponential backoff; an exception
does the same and is logged. Delays are measured on the injected `Clock`, so a test moves
them forward without waiting.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import IntEnum

from dispatcher.clock import Clock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    """What to do with a key after its reconcile."""

    requeue_after: float | None = None
    rate_limited: bool = False

    @staticmethod
    def done() -> Result:
        return _DONE

    @staticmethod
    def after(seconds: float) -> Result:
        return Result(requeue_after=seconds)

    @staticmethod
    def retry() -> Result:
        return _RETRY


_DONE = Result()
_RETRY = Result(rate_limited=True)


class Lane(IntEnum):
    """Where a key waits; a lower lane is served first."""

    URGENT = 0
    PROMPT = 1
    ORDINARY = 2


_NOT_QUEUED = len(Lane)
Reconciler = Callable[[str], Awaitable[Result]]
WaitObserver = Callable[[Lane, float], None]


def _no_observer(lane: Lane, seconds: float) -> None:
    return None


class WorkQueue:
    """Keys waiting to be reconciled, in arrival order, each at most once."""

    def __init__(
        self,
        *,
        name: str,
        clock: Clock,
        backoff_base_seconds: float = 0.05,
        backoff_max_seconds: float = 60.0,
        on_wait: WaitObserver = _no_observer,
    ) -> None:
        self.name = name
        self._clock = clock
        self._on_wait = on_wait
        self._added_at: dict[str, float] = {}
        """When each queued key was first added (kept when it moves to an earlier lane)."""
        self._ready: asyncio.PriorityQueue[tuple[int, int, str]] = asyncio.PriorityQueue()
        self._sequence = itertools.count()
        self._queued: dict[str, int] = {}
        """Queued keys and the lane they wait in."""
        self._processing: set[str] = set()
        self._dirty: dict[str, Lane] = {}
        self._delayed: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._backoff_base = backoff_base_seconds
        self._backoff_max = backoff_max_seconds
        self._timer_wakeup = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queued) + len(self._due)

    def idle(self) -> bool:
        """No key is ready or being reconciled (keys due later may wait)."""
        return not self._queued and not self._processing

    def add(self, key: str, *, lane: Lane = Lane.ORDINARY) -> None:
        if key in self._processing:
            self._dirty[key] = min(lane, self._dirty.get(key, lane))
            return
        if self._queued.get(key, _NOT_QUEUED) <= lane:
            return
        self._queued[key] = lane  # an entry left behind in a later lane is skipped when popped
        self._added_at.setdefault(key, self._clock.monotonic())
        self._ready.put_nowait((lane, next(self._sequence), key))

    def add_after(self, key: str, seconds: float) -> None:
        if seconds <= 0:
            self.add(key)
            return
        due = self._clock.monotonic() + seconds
        if key in self._due and self._due[key] <= due:
            return
        self._due[key] = due
        heapq.heappush(self._delayed, (due, key))
        self._timer_wakeup.set()

    def add_rate_limited(self, key: str) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = min(self._backoff_base * 2.0**failures, self._backoff_max)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    async def _run_timer(self) -> None:
        while True:
            now = self._clock.monotonic()
            while self._delayed and self._delayed[0][0] <= now:
                due, key = heapq.heappop(self._delayed)
                if self._due.get(key) == due:
                    del self._due[key]
                    self.add(key)
            self._timer_wakeup.clear()
            timeout = self._delayed[0][0] - now if self._delayed else None
            await self._clock.wait(self._timer_wakeup, timeout)

    async def _worker(self, reconcile: Reconciler) -> None:
        while True:
            lane, _, key = await self._ready.get()
            if self._queued.get(key) != lane:
                continue  # moved to an earlier lane, or already processed from it
            del self._queued[key]
            self._on_wait(Lane(lane), self._clock.monotonic() - self._added_at.pop(key))
            self._processing.add(key)
            try:
                result = await reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                delay = self.add_rate_limited(key)
                log.exception("%s: reconcile of %s failed, retrying in %.2fs",
                              self.name, key, delay)
            else:
                if result.rate_limited:
                    self.add_rate_limited(key)
                else:
                    self.forget(key)
                    if result.requeue_after is not None:
                        self.add_after(key, result.requeue_after)
            finally:
                self._processing.discard(key)
                dirty = self._dirty.pop(key, None)
                if dirty is not None:
                    self.add(key, lane=dirty)

    async def run_workers(self, reconcile: Reconciler, *, workers: int) -> None:
        """Process keys with `workers` concurrent workers until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._run_timer(), name=f"{self.name}/timer")
            for index in range(workers):
                group.create_task(self._worker(reconcile), name=f"{self.name}/worker-{index}")
