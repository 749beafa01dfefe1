"""A worker's capacity from its inputs: the declared quota, the ledger, its Kueue, and the
reservation of each of our mirrors' Workloads; and what the scheduler sees of a worker.

`worker_capacity` is pure; `Capacities` reads the inputs from a worker connection, here
plain objects standing in for its caches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.workercluster import WorkerSpec
from dispatcher.controllers.capacity import Capacities
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.placement.capacity import worker_capacity
from dispatcher.placement.ledger import Booking, Holding, Ledger
from dispatcher.placement.live_quota import QueueQuota, Reservation

F = Fraction
KIND = TrainJobKind()


def cpu(amount: int) -> dict[str, Fraction]:
    return {"cpu": F(amount)}


def queue(name: str = "cq", nominal: int = 10) -> QueueQuota:
    return QueueQuota(name=name, nominal=cpu(nominal), borrowing_limit={"cpu": None},
                      lendable=cpu(nominal))


@dataclass
class FakeKueue:
    """What a WorkerKueue offers the capacity: its queues, what they hold, reservations."""

    cluster_queue: str = "cq"
    queues: dict[str, QueueQuota] = field(default_factory=lambda: {"cq": queue()})
    reserved: dict[str, dict[str, Fraction]] = field(default_factory=dict)
    by_mirror: dict[str, Reservation] = field(default_factory=dict)
    priority_classes: frozenset[str] | None = None

    def reservation_of(self, mirror_uid: str) -> Reservation | None:
        return self.by_mirror.get(mirror_uid)


@dataclass
class FakeCache:
    store: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.store.get(key)


@dataclass
class FakeWorker:
    """The parts of a WorkerConnection the capacity and the scheduler's view read."""

    name: str = "w"
    spec: WorkerSpec = field(default_factory=lambda: WorkerSpec(name="w", kubeconfig=None,
                                                                quota=cpu(8)))
    kueue: FakeKueue | None = None
    mirrors: FakeCache | None = field(default_factory=FakeCache)
    is_usable: bool = True
    collected: bool = True
    reason: str = c.REASON_CONNECTED
    message: str = "connected"

    def usable(self) -> bool:
        return self.is_usable


def mirror(key: str, *, manager_uid: str, uid: str, origin: str = "o") -> dict[str, Any]:
    namespace, name = key.split("/")
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid,
                         "labels": {c.LABEL_ORIGIN: origin},
                         "annotations": {c.ANNOTATION_MANAGER_UID: manager_uid}}}


def no_reservation(holding: Holding) -> Reservation | None:
    return None


def test_without_a_queue_it_is_the_declared_quota_minus_the_ledger() -> None:
    ledger = Ledger()
    ledger.book(Booking("u1", "ns/a", "w", cpu(3)))
    ledger.mirror_seen("w", "u2", "ns/b", cpu(2))  # unrecorded, but it runs
    room = worker_capacity(worker="w", declared=cpu(8), ledger=ledger, kueue=None,
                           reservation_of=no_reservation)
    assert (room.quota, room.used_by_us, room.free) == (cpu(8), cpu(5), cpu(3))


def test_a_queue_not_listed_yet_counts_as_no_queue() -> None:
    ledger = Ledger()
    ledger.book(Booking("u1", "ns/a", "w", cpu(3)))
    room = worker_capacity(worker="w", declared=cpu(8), ledger=ledger,
                           kueue=FakeKueue(queues={}), reservation_of=no_reservation)
    assert room.free == cpu(5) and room.used_by_others == {}


def test_with_a_queue_each_holding_counts_once_at_the_larger_of_booking_and_reservation(
) -> None:
    ledger = Ledger()
    ledger.book(Booking("u1", "ns/a", "w", cpu(3)))
    ledger.book(Booking("u2", "ns/b", "w", cpu(2)))
    reservations = {"u1": Reservation("cq", "m1", cpu(4))}  # a admitted bigger; b not yet
    # Kueue holds 7 in the queue: a's 4 and 3 of a job that is not ours.
    kueue = FakeKueue(reserved={"cq": cpu(7)})
    room = worker_capacity(worker="w", declared=None, ledger=ledger, kueue=kueue,
                           reservation_of=lambda holding: reservations.get(holding.uid))
    assert room.used_by_others == cpu(3)
    assert room.free == cpu(1)  # 10 - 3 others - 4 (a) - 2 (b, booked, not admitted)
    assert room.used_by_us == cpu(5)


def test_capacities_find_the_reservation_of_our_own_mirror_only() -> None:
    ledger = Ledger()
    ledger.book(Booking("u1", "ns/a", "w", cpu(3)))
    ledger.book(Booking("u2", "ns/b", "w", cpu(3)))
    kueue = FakeKueue(reserved={"cq": cpu(9)}, by_mirror={
        "m1": Reservation("cq", "m1", cpu(5)), "m2": Reservation("cq", "m2", cpu(4))})
    worker = FakeWorker(kueue=kueue, spec=WorkerSpec(name="w", kubeconfig=None, quota=None),
                        mirrors=FakeCache({
                            "ns/a": mirror("ns/a", manager_uid="u1", uid="m1"),
                            # b's name holds a mirror of another job (re-created): not ours
                            "ns/b": mirror("ns/b", manager_uid="old", uid="m2")}))
    room = Capacities(ledger=ledger, kind=KIND, origin="o").of(worker)
    # Kueue's 9: a's 5 (counted at 5, not its booking of 3) and 4 not ours.
    assert room.used_by_others == cpu(4)
    assert room.free == cpu(0)  # 10 - 4 - 5 - 3 (b's booking, no reservation of its own)


def test_capacities_without_a_kueue_read_the_declared_quota() -> None:
    ledger = Ledger()
    ledger.book(Booking("u1", "ns/a", "w", cpu(6)))
    room = Capacities(ledger=ledger, kind=KIND, origin="o").of(FakeWorker())
    assert room.free == cpu(2) and room.ceiling == cpu(8)


def test_the_scheduler_sees_a_worker_take_jobs_only_once_usable_and_collected() -> None:
    ledger = Ledger()
    ledger.book(Booking("u1", "ns/a", "w", cpu(6)))
    capacities = Capacities(ledger=ledger, kind=KIND, origin="o")
    ready = FakeWorker(kueue=FakeKueue(queues={}, priority_classes=frozenset({"high"})))
    collecting = FakeWorker(name="x", collected=False)
    lost = FakeWorker(name="y", is_usable=False, reason=c.REASON_UNREACHABLE, message="timeout")
    draining = FakeWorker(name="z", spec=WorkerSpec(name="z", kubeconfig=None, drain=True,
                                                    labels={"gpu": "a100"}))
    views = capacities.views([ready, collecting, lost, draining])
    assert [(v.name, v.active, v.cordoned, v.unavailable) for v in views] == [
        ("w", True, False, ""), ("x", False, False, "collecting stale mirrors"),
        ("y", False, False, f"{c.REASON_UNREACHABLE}: timeout"), ("z", True, True, "draining")]
    assert (views[0].quota, views[0].used) == (cpu(8), cpu(6))
    assert views[0].priority_classes == frozenset({"high"})
    assert views[3].labels == {"gpu": "a100"} and views[3].quota is None
