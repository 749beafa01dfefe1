"""A worker's capacity: quota, used by this dispatcher, used by others, and free.

The one computation behind the scheduler's view, the WorkerCluster status, the CLI and
the metrics, so they never disagree.

- quota: the declared quota, capped per resource by the nominal quota of the worker's
  Kueue ClusterQueue when one is named; None means unlimited;
- ceiling: the most the worker could ever give the dispatcher: the quota, or with a
  cohort the queue's `potential` (borrowing included), capped by the declared quota;
- used by us: what the ledger books on the worker;
- used by others: what Workloads that are not our mirrors hold in the queue;
- free: what the queue can admit now (`live_quota.available`) with every booking of
  ours counted at the larger of its booking and its Workload's reservation, capped by
  the declared quota minus our bookings; without a ClusterQueue, quota minus used.

`queue_room` counts our mirrors exactly once: a Workload that belongs to a booked mirror
is replaced by the booking (never both), and a booking whose mirror Kueue has not yet
admitted (or whose admission is not yet seen) is counted all the same.

`worker_capacity` is the whole computation for one worker from its inputs: the declared
quota, the ledger's holdings there and, with a ClusterQueue, the worker's queues and the
reservation each holding's Workload has (`controllers/capacity.py` reads them from the
worker's caches).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

from dispatcher.placement import resources
from dispatcher.placement.ledger import Holding, Ledger
from dispatcher.placement.live_quota import QueueQuota, Reservation, available, potential

Vector = dict[str, Fraction]


@dataclass(frozen=True)
class QueueRoom:
    """A ClusterQueue's room for this dispatcher."""

    nominal: Vector
    ceiling: Vector
    free: Vector
    used_by_others: Vector


@dataclass(frozen=True)
class OurJob:
    """A booking of ours on the worker and the reservation its mirror's Workload holds."""

    booked: Vector
    reservation: Reservation | None = None


def queue_room(queue: QueueQuota, queues: Mapping[str, QueueQuota],
               reserved: Mapping[str, Vector], ours: Iterable[OurJob]) -> QueueRoom:
    """`reserved`: what all Workloads hold per ClusterQueue, ours included."""
    ours_reserved: Vector = {}
    ours_held: Vector = {}
    for job in ours:
        if job.reservation is not None and job.reservation.cluster_queue == queue.name:
            ours_reserved = resources.add(ours_reserved, job.reservation.usage)
            ours_held = resources.add(ours_held,
                                      resources.maximum([job.booked, job.reservation.usage]))
        else:
            ours_held = resources.add(ours_held, job.booked)
    others = {name: amount for name, amount in
              resources.subtract(reserved.get(queue.name, {}), ours_reserved).items()
              if amount > 0}
    usage = dict(reserved)
    usage[queue.name] = resources.add(others, ours_held)
    return QueueRoom(nominal=dict(queue.nominal), ceiling=potential(queue, queues),
                     free=available(queue, queues, usage), used_by_others=others)


def cap(declared: Vector | None, live: Vector | None) -> Vector | None:
    """The smaller of the two per resource; a resource only one of them names is not
    offered when both are known (the queue cannot admit what it does not cover)."""
    if live is None:
        return None if declared is None else dict(declared)
    if declared is None:
        return dict(live)
    return {name: min(amount, declared[name]) for name, amount in live.items() if name in declared}


@dataclass(frozen=True)
class Capacity:
    quota: Vector | None
    used_by_us: Vector = field(default_factory=dict)
    used_by_others: Vector = field(default_factory=dict)
    free: Vector | None = None
    """None means unlimited."""
    ceiling: Vector | None = None
    """None means unlimited."""

    @property
    def used(self) -> Vector:
        return resources.add(self.used_by_us, self.used_by_others)

    @property
    def scheduler_used(self) -> Vector:
        """What the scheduler treats as used of `ceiling`: whatever is not free."""
        if self.ceiling is None or self.free is None:
            return self.used
        return {name: max(Fraction(0), amount - self.free.get(name, Fraction(0)))
                for name, amount in self.ceiling.items()}


def capacity(*, declared: Vector | None, booked: Vector,
             room: QueueRoom | None = None) -> Capacity:
    used_by_us = {name: amount for name, amount in booked.items() if amount}
    if room is None:
        free = None if declared is None else {
            name: amount - booked.get(name, Fraction(0)) for name, amount in declared.items()}
        return Capacity(quota=declared, used_by_us=used_by_us, free=free, ceiling=declared)
    free = room.free
    if declared is not None:
        free = {name: min(amount, declared[name] - booked.get(name, Fraction(0)))
                for name, amount in free.items() if name in declared}
    return Capacity(quota=cap(declared, room.nominal), used_by_us=used_by_us,
                    used_by_others=room.used_by_others,
                    free={name: max(Fraction(0), amount) for name, amount in free.items()},
                    ceiling=cap(declared, room.ceiling))


class Queues(Protocol):
    """A worker's Kueue as its capacity reads it."""

    @property
    def cluster_queue(self) -> str:
        """The ClusterQueue the worker's mirrors are admitted through."""
        ...

    @property
    def queues(self) -> Mapping[str, QueueQuota]:
        """The worker's ClusterQueues by name, as last listed."""
        ...

    @property
    def reserved(self) -> Mapping[str, Vector]:
        """ClusterQueue -> what all its Workloads hold, ours included."""
        ...


def worker_capacity(*, worker: str, declared: Vector | None, ledger: Ledger,
                    kueue: Queues | None,
                    reservation_of: Callable[[Holding], Reservation | None]) -> Capacity:
    """The capacity of `worker`: without a listed ClusterQueue the declared quota minus
    the ledger; with one, its room (`queue_room`) with each holding of ours counted at
    the larger of the holding and the reservation its Workload has (`reservation_of`)."""
    booked = ledger.used(worker)
    queue = kueue.queues.get(kueue.cluster_queue) if kueue is not None else None
    if kueue is None or queue is None:
        return capacity(declared=declared, booked=booked)
    ours = [OurJob(booked=holding.demand, reservation=reservation_of(holding))
            for holding in ledger.holdings(worker)]
    return capacity(declared=declared, booked=booked,
                    room=queue_room(queue, kueue.queues, kueue.reserved, ours))
