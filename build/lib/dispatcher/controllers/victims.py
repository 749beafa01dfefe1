"""The jobs that hold quota on each worker, as a preemption sees them, from the caches.

`running_jobs(...)` is the scheduler's `RunningJobs`: for every registered worker, each
job the ledger counts there (booked, or with a live mirror) whose Placement record puts
it there, or that is already the victim of a nomination there (taken off, its mirror
still going), with the priority its record was placed with and the time its mirror was
made (the run a preemption would lose). A mirror with no record placing it there
(an orphan, the garbage collector's) is no one's to preempt. A mirror being deleted
(`deletionTimestamp`: a victim taken off before a restart, an eviction) is *leaving*: its
room comes back without stopping anyone, whoever's record it is.

While a registered worker is still joining (connecting, or active with its caches not
synced or its stale mirrors not collected), no job is offered as a victim anywhere: a
preemption chosen then (right after a start or a leader change) could stop jobs on one
worker where a cheaper set, or free room, waits on the worker not yet seen.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Collection, Iterable
from typing import Any

from dispatcher.api import constants as c
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.workers import WorkerConnection
from dispatcher.placement.ledger import Ledger
from dispatcher.placement.preemption import Running


def _created(obj: dict[str, Any] | None, default: float) -> float:
    text = ((obj or {}).get("metadata") or {}).get("creationTimestamp")
    if not text:
        return default
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default


def still_joining(worker: WorkerConnection) -> bool:
    if worker.reason == c.REASON_CONNECTING:
        return True
    return worker.active and not (worker.usable() and worker.collected)


def running_jobs(workers: Iterable[WorkerConnection], *, ledger: Ledger,
                 records: PlacementRecords, victims: Callable[[str], Collection[str]],
                 now: float) -> dict[str, list[Running]]:
    """Worker -> its possible victims; `victims(worker)`: the UIDs already nominated there."""
    found: dict[str, list[Running]] = {}
    for worker in workers:
        nominated = victims(worker.name)
        jobs = found[worker.name] = []
        for holding in ledger.holdings(worker.name):
            record = records.of_uid(holding.uid)
            placed_here = record is not None and record.worker == worker.name
            mirror = worker.mirrors.get(holding.key) if worker.mirrors is not None else None
            leaving = bool((mirror or {}).get("metadata", {}).get("deletionTimestamp"))
            if not placed_here and holding.uid not in nominated and not leaving:
                continue
            jobs.append(Running(uid=holding.uid, key=holding.key, worker=worker.name,
                                demand=holding.demand,
                                priority=record.priority if record is not None else 0,
                                started=_created(mirror, now), leaving=leaving))
    return found
