"""What the gauges and the status page read from a leadership term, taken from its caches.

`reading` gathers the gauges' `Reading` (per worker: booked and running jobs, room, watch
restarts; the scheduler's queue, the reconcile queue, the jobs by reason: `reason_of`,
which the jobs cache indexes as `reason_index` says).
`status_view_inputs` takes the status view's inputs now (the workers' rows as their
WorkerCluster status would be written, the cached jobs, the queue's priorities, the
recent events) and returns `build_view` bound to them, to run later, in a thread: the
cached objects are replaced on change, never changed in place, so the build sees a
consistent set. Neither writes anything. The term's parts come in as the few methods
read of them (this layer imports no controller).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from dispatcher.api import constants as c
from dispatcher.api.conditions import condition
from dispatcher.api.workercluster import WorkerSpec
from dispatcher.claim import Claim
from dispatcher.kinds import JobKind
from dispatcher.kube.informer import Indexer, Informer
from dispatcher.observability.gauges import Reading, WorkerReading
from dispatcher.observability.statusview import StatusView, WorkerRow, build_view, worker_row
from dispatcher.placement.capacity import Capacity
from dispatcher.placement.ledger import Ledger
from dispatcher.placement.scheduler import PendingJob

JSON = dict[str, Any]


class WorkerLike(Protocol):
    """What is read of a worker connection."""

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> WorkerSpec: ...
    @property
    def mirrors(self) -> Informer | None: ...
    def usable(self) -> bool: ...


W = TypeVar("W", bound=WorkerLike)
REASON_NEW = "New"
"""The metric's label for claimed jobs that have no Dispatched condition yet."""


def reason_of(job: JSON, *, claim: Claim, kind: JobKind) -> str | None:
    """A claimed, unfinished job's Dispatched reason (`REASON_NEW` before it has one);
    None for any other job. The jobs cache indexes its jobs by it, so the gauges count
    them without a walk of every job."""
    if not claim.claims(job) or kind.finished(job.get("status")) is not None:
        return None
    dispatched = condition(job.get("status"), c.CONDITION_DISPATCHED) or {}
    return str(dispatched.get("reason") or REASON_NEW)


BY_REASON = "dispatched-reason"
"""The jobs cache's index of claimed, unfinished jobs by their Dispatched reason."""


def reason_index(*, claim: Claim, kind: JobKind) -> dict[str, Indexer]:
    """The jobs cache's `indexes`: `BY_REASON`, so `counts(BY_REASON)` is the gauge."""
    return {BY_REASON: functools.partial(reason_of, claim=claim, kind=kind)}


def reading(*, workers: Iterable[W], capacity_of: Callable[[W], Capacity], ledger: Ledger,
            jobs: Mapping[str, JSON], kind: JobKind, pending: int, queue_depth: int,
            reasons: Mapping[str, int]) -> Reading:
    """Per worker, the jobs booked there and how many of them run (the kind's rule, on
    the manager job's status)."""
    rows = []
    for worker in workers:
        bookings = ledger.jobs_on(worker.name)
        placed = len(bookings)
        running = sum(1 for booking in bookings if kind.running(jobs.get(booking.key)))
        rows.append(WorkerReading(
            name=worker.name, usable=worker.usable(), placed=placed, running=running,
            capacity=capacity_of(worker),
            watch_restarts=worker.mirrors.restarts if worker.mirrors else None))
    return Reading(pending=pending, queue_depth=queue_depth, workers=rows, reasons=reasons)


def status_view_inputs(*, workers: Iterable[W], registrations: Informer | None,
                       desired_status: Callable[[JSON, W], JSON], jobs: Mapping[str, JSON],
                       claim: Claim, kind: JobKind, placements: Mapping[str, str],
                       pending: Iterable[PendingJob],
                       events: Iterable[Mapping[str, Any]], offset: int, limit: int
                       ) -> Callable[[], StatusView]:
    """The status view's inputs taken now (each worker's row from its WorkerCluster
    object in `registrations`, if any, and the status it would be written); the build
    returned to run later."""
    rows: list[WorkerRow] = []
    for worker in workers:
        obj = (registrations.get(worker.name) if registrations else None) or {}
        rows.append(worker_row(worker.name, {"cordoned": worker.spec.cordoned,
                                             "drain": worker.spec.drain},
                               desired_status(obj, worker)))
    return functools.partial(
        build_view, workers=rows, jobs=list(jobs.values()), claim=claim, kind=kind,
        placements=dict(placements), priorities={p.key: p.priority for p in pending},
        events=list(events), offset=offset, limit=limit)
