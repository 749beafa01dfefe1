"""The gauges: what the dispatcher holds and waits for, published every few seconds.

A `Reading` is plain data taken from the caches, the ledger and the queue (the leader's
wiring takes it); `Gauges.publish` sets every gauge from one reading, so the gauges of
one moment agree with each other. `worker_usable` is the one place that sets
`dispatcher_worker_active`, whose one meaning is usable: connected, healthy and its
caches synced (what a mirror may be created on and its caches trusted); it is also set at
once when a worker changes, not only on the next reading.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dispatcher.clock import Clock
from dispatcher.observability.metrics import Metrics
from dispatcher.placement.capacity import Capacity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerReading:
    name: str
    usable: bool
    placed: int
    """Jobs booked on the worker."""
    running: int
    """Of those, the ones running (the kind's rule, on the manager job's status)."""
    capacity: Capacity
    watch_restarts: int | None = None
    """Restarts of its mirror watch; None before the worker has one."""


@dataclass(frozen=True)
class Reading:
    pending: int
    """Claimed jobs waiting in the scheduler's queue."""
    queue_depth: int
    """Keys waiting in the reconcile queue."""
    workers: Sequence[WorkerReading]
    reasons: Mapping[str, int]
    """Claimed, unfinished jobs by their Dispatched reason."""


class Gauges:
    def __init__(self, metrics: Metrics, *, clock: Clock) -> None:
        self._metrics = metrics
        self._clock = clock

    def worker_usable(self, worker: str, usable: bool) -> None:
        self._metrics.worker_active.labels(worker).set(1 if usable else 0)

    def publish(self, reading: Reading) -> None:
        m = self._metrics
        m.pending_jobs.set(reading.pending)
        m.jobs.clear()
        m.jobs.labels("pending", "").set(reading.pending)
        for worker in reading.workers:
            m.jobs.labels("placed", worker.name).set(worker.placed)
            m.jobs.labels("running", worker.name).set(worker.running)
            self.worker_usable(worker.name, worker.usable)
            self._capacity(worker.name, worker.capacity)
            if worker.watch_restarts is not None:
                m.watch_restarts.labels(worker.name).set(worker.watch_restarts)
        m.queue_depth.set(reading.queue_depth)
        m.jobs_by_reason.clear()
        for reason, count in reading.reasons.items():
            m.jobs_by_reason.labels(reason).set(count)

    def _capacity(self, worker: str, room: Capacity) -> None:
        m = self._metrics
        quota, free = room.quota or {}, room.free or {}
        ours, others = room.used_by_us, room.used_by_others
        for name in set(quota) | set(ours) | set(others):
            m.worker_used.labels(worker, name).set(float(ours.get(name, 0)))
            m.worker_used_by_others.labels(worker, name).set(float(others.get(name, 0)))
            if name in quota:
                m.worker_quota.labels(worker, name).set(float(quota[name]))
                m.worker_free.labels(worker, name).set(float(free.get(name, 0)))

    async def run(self, read: Callable[[], Reading], *, interval: float) -> None:
        """Publish a reading every `interval` seconds; a failed one is logged."""
        while True:
            try:
                self.publish(read())
            except Exception:
                log.exception("refreshing gauges failed")
            await self._clock.sleep(interval)
