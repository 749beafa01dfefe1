"""What each worker has room for, read from the ledger and the worker's caches, and the
scheduler's view of every worker.

`Capacities.of(worker)` is the one capacity the scheduler, the WorkerCluster status, the
status page and the metrics read: it gives `placement.capacity.worker_capacity` the
worker's declared quota, the ledger, its Kueue's queues and, for each of our holdings
there, the reservation of the Workload of our mirror of that job (a mirror that is not
ours, or not seen, has none). `views(workers)` is what a scheduling pass knows of each
worker: its ceiling and what of it is not free, its labels, whether it takes new jobs
(usable and its stale mirrors collected, not cordoned) and, when not, why.
"""

from __future__ import annotations

from collections.abc import Iterable

from dispatcher.controllers.workers import WorkerConnection
from dispatcher.kinds import JobKind
from dispatcher.placement.capacity import Capacity, worker_capacity
from dispatcher.placement.ledger import Holding, Ledger
from dispatcher.placement.live_quota import Reservation
from dispatcher.placement.scheduler import WorkerView


def unavailable(worker: WorkerConnection) -> str:
    """Why the worker takes no new jobs now; empty when it does."""
    if worker.spec.drain:
        return "draining"
    if not worker.usable():
        return f"{worker.reason}: {worker.message}"
    return "" if worker.collected else "collecting stale mirrors"


class Capacities:
    def __init__(self, *, ledger: Ledger, kind: JobKind, origin: str) -> None:
        self._ledger = ledger
        self._kind = kind
        self._origin = origin

    def of(self, worker: WorkerConnection) -> Capacity:
        """The worker's quota, what we and others use of it, and what is free."""
        kueue = worker.kueue

        def reservation_of(holding: Holding) -> Reservation | None:
            mirror = worker.mirrors.get(holding.key) if worker.mirrors is not None else None
            if kueue is None or mirror is None or not self._kind.is_ours(
                    mirror, manager_uid=holding.uid, origin=self._origin):
                return None
            return kueue.reservation_of(mirror["metadata"].get("uid", ""))

        return worker_capacity(worker=worker.name, declared=worker.spec.quota,
                               ledger=self._ledger, kueue=kueue, reservation_of=reservation_of)

    def views(self, workers: Iterable[WorkerConnection]) -> list[WorkerView]:
        views = []
        for worker in workers:
            spec = worker.spec
            room = self.of(worker)
            views.append(WorkerView(
                name=worker.name, quota=room.ceiling, used=room.scheduler_used,
                labels=spec.labels, active=worker.usable() and worker.collected,
                cordoned=spec.cordoned or spec.drain, unavailable=unavailable(worker),
                priority_classes=worker.kueue.priority_classes if worker.kueue else None,
            ))
        return views
