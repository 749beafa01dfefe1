"""What the gauges and the status page read from a leadership term, taken from its caches.

`reading` gathers the gauges' `Reading` (per worker: booked and running jobs, room, watch
restarts; the scheduler's queue, the reconcile queue, the jobs by reason).
`status_view_inputs` takes the status view's inputs now (the workers' rows as the
WorkerCluster status would be written, the cached jobs, the queue's priorities, the
recent events) and returns `build_view` bound to them, to run later, in a thread: the
cached objects are replaced on change, never changed in place, so the build sees a
consistent set. Neither writes anything.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from dispatcher.claim import Claim
from dispatcher.controllers.capacity import Capacities
from dispatcher.controllers.jobs.controller import JobsController
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.controllers.workerclusters import WorkerClustersController
from dispatcher.controllers.workers import WorkerRegistry
from dispatcher.kinds import JobKind
from dispatcher.kube.workqueue import WorkQueue
from dispatcher.observability.events import EventRecorder
from dispatcher.observability.gauges import Reading, WorkerReading
from dispatcher.observability.statusview import StatusView, WorkerRow, build_view, worker_row


def reading(*, registry: WorkerRegistry, jobs: JobsController, capacities: Capacities,
            scheduling: SchedulingLoop, queue: WorkQueue) -> Reading:
    workers = []
    for worker in registry.workers.values():
        placed, running = jobs.placed_and_running(worker.name)
        workers.append(WorkerReading(
            name=worker.name, usable=worker.usable(), placed=placed, running=running,
            capacity=capacities.of(worker),
            watch_restarts=worker.mirrors.restarts if worker.mirrors else None))
    return Reading(pending=len(scheduling.pending), queue_depth=len(queue),
                   workers=workers, reasons=jobs.reasons())


def status_view_inputs(*, registry: WorkerRegistry, worker_clusters: WorkerClustersController,
                       jobs: Mapping[str, Any], claim: Claim, kind: JobKind,
                       scheduling: SchedulingLoop, events: EventRecorder, offset: int,
                       limit: int) -> Callable[[], StatusView]:
    """The status view's inputs taken now; the build returned to run later."""
    rows: list[WorkerRow] = []
    crd = worker_clusters.worker_clusters
    for worker in registry.workers.values():
        obj = (crd.get(worker.name) if crd else None) or {}
        status = worker_clusters.desired_status(obj, worker)
        rows.append(worker_row(worker.name, {"cordoned": worker.spec.cordoned,
                                             "drain": worker.spec.drain}, status))
    return functools.partial(
        build_view, workers=rows, jobs=list(jobs.values()), claim=claim, kind=kind,
        priorities={p.key: p.priority for p in scheduling.pending.values()},
        events=list(events.recent), offset=offset, limit=limit)
