"""The executor: the controller carrying out each action and recording what it found.

`decide` chose the action (tests/unit/test_decide.py); here the controller runs it
against plain objects standing in for its caches and writers, never an API server: each
test checks the writes in their order, the quota released or booked (a real ledger and
scheduling loop), and the facts written to the job's memory, and nothing else.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, cast

import pytest

from devkit.factories import condition, trainjob
from devkit.fakeclock import FakeClock
from dispatcher.api import constants as c
from dispatcher.api.placement import PlacementRecord
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE
from dispatcher.claim import Claim
from dispatcher.config import DispatcherConfig
from dispatcher.controllers.jobs import actions as a
from dispatcher.controllers.jobs.bookkeeping import Bookkeeper
from dispatcher.controllers.jobs.controller import JobsController
from dispatcher.controllers.jobs.decide import decide
from dispatcher.controllers.jobs.manager_side import Conflict
from dispatcher.controllers.jobs.memory import JobMemory, Refusal
from dispatcher.controllers.jobs.snapshot import Absent, Claimed, Leftover, Snapshot, WorkerState
from dispatcher.controllers.jobs.worker_side import Refused
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.informer import DELETED
from dispatcher.kube.workqueue import Lane, Result
from dispatcher.observability.metrics import Metrics
from dispatcher.placement.ledger import Booking, Ledger
from dispatcher.placement.options import PlacementPolicy, QueueingStrategy
from dispatcher.placement.scheduler import PendingJob

KIND = TrainJobKind()
CONFIG = DispatcherConfig.model_validate({
    "mirror": {"origin": "o"},
    "placement": {"rejectionBackoffSeconds": 30},
    "workers": {"probeIntervalSeconds": 5},
})
UID = "uid-1"
DEMAND = {"cpu": Fraction(2), "pods": Fraction(1)}
NOW = 0.0
"""The fake clock's monotonic time, which stands still through every test."""
EPOCH = FakeClock().time()
"""The fake clock's wall-clock time (what requeue times in records count from)."""
ACTIVE = WorkerState(name="w", usable=True, lost_for=None, draining=False, message="")


def job(**kw: Any) -> dict[str, Any]:
    obj = trainjob("j", "ns", managed_by=MANAGED_BY_MULTIKUEUE, **kw)
    obj["metadata"].update(uid=UID, resourceVersion="7")
    return obj


def mirror(*, uid: str = "m-1", manager_uid: str = UID) -> dict[str, Any]:
    body = KIND.build_mirror(job(), origin="o", local_queue="")
    body["metadata"].update(uid=uid)
    body["metadata"]["annotations"][c.ANNOTATION_MANAGER_UID] = manager_uid
    return body


def record(worker: str = "w", *, evictions: int = 0) -> PlacementRecord:
    return PlacementRecord(uid=UID, key="ns/j", worker=worker,
                           demand=dict(DEMAND) if worker else {}, evictions=evictions)


def claimed(**kw: Any) -> Claimed:
    fields: dict[str, Any] = dict(key="ns/j", now=NOW, job=job(), demand=DEMAND,
                                  runtime={"kind": "ClusterTrainingRuntime",
                                           "metadata": {"name": "torch"}})
    fields.update(kw)
    return Claimed(**fields)


# ----- the stand-ins: plain objects that record what they were asked -----


class FakeManager:
    """The manager writer: records each write; answers as the API server would."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.gone = False
        self.conflict = False
        self.view_conflict = False
        self.written: list[PlacementRecord] = []

    def now(self) -> str:
        return "2026-12-02T00:00:00Z"

    async def set_waiting(self, job: Any, reason: str, message: str, *, warn: bool = False,
                          extra: list[Any] | None = None) -> Any:
        self.calls.append(("waiting", reason, message, [x["reason"] for x in extra or []]))
        return job

    async def set_placed(self, job: Any, mirror: Any, *, reason: str, message: str,
                         news_seen: float | None = None) -> Any:
        self.calls.append(("placed", reason, message, news_seen))
        return job

    async def set_held(self, job: Any, *, reason: str, message: str) -> Any:
        self.calls.append(("held", reason, message))
        return job

    async def write_record(self, rec: PlacementRecord, *, previous: Any) -> PlacementRecord:
        if self.conflict:
            raise Conflict("the record changed")
        self.calls.append(("record", rec.worker, rec.evictions))
        self.written.append(rec)
        return rec

    async def delete_record(self, rec: PlacementRecord) -> None:
        self.calls.append(("delete record", rec.uid))

    async def write_view(self, job: Any, rec: Any) -> Any:
        self.calls.append(("view", rec.worker if rec is not None else None))
        if self.view_conflict:
            raise Conflict("the job changed")
        return None if self.gone else job

    async def drop_finalizer(self, job: Any) -> Any:
        self.calls.append(("drop finalizer",))
        return None if self.gone else job


class FakeWorkers:
    """The worker writer: creates (or refuses) and deletes mirrors."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.refusal: Refused | None = None
        self.fail = False

    async def create_mirror(self, job: Any, worker: Any, demand: Any) -> Any:
        self.calls.append(("create", worker.name, dict(demand)))
        return self.refusal or (mirror(), True)

    async def delete_mirror(self, worker: Any, body: Any) -> bool:
        self.calls.append(("delete", worker.name, body["metadata"]["uid"]))
        if self.fail:
            raise RuntimeError("the worker broke the connection")
        return True


@dataclass
class FakeConnection:
    name: str
    is_usable: bool = True

    def usable(self) -> bool:
        return self.is_usable


@dataclass
class FakeRegistry:
    workers: dict[str, FakeConnection] = field(
        default_factory=lambda: {"w": FakeConnection("w"), "v": FakeConnection("v")})

    def get(self, name: str) -> FakeConnection | None:
        return self.workers.get(name)


@dataclass
class FakeCache:
    store: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.store.get(key)


class FakeRecords:
    def __init__(self) -> None:
        self.records: list[PlacementRecord] = []

    def of_job(self, key: str) -> list[PlacementRecord]:
        return [r for r in self.records if r.key == key]

    def of_uid(self, uid: str) -> PlacementRecord | None:
        return next((r for r in self.records if r.uid == uid), None)

    def all(self) -> list[PlacementRecord]:
        return list(self.records)


class FakeQueue:
    def __init__(self) -> None:
        self.added: list[tuple[str, Lane]] = []

    def add(self, key: str, *, lane: Lane = Lane.ORDINARY) -> None:
        self.added.append((key, lane))

    def __len__(self) -> int:
        return len(self.added)


class FakeEvents:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, bool]] = []

    def record(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        self.recorded.append((reason, message, warning))


class FakeReader:
    """Hands out the snapshots a test lines up, one per read (the last one again)."""

    def __init__(self, *snapshots: Snapshot) -> None:
        self.snapshots = list(snapshots)

    async def read(self, key: str, memories: Any) -> Snapshot:
        return self.snapshots.pop(0) if len(self.snapshots) > 1 else self.snapshots[0]

    def held_by(self, body: Any, uid: str) -> dict[str, Fraction]:
        return dict(DEMAND)


@dataclass
class Rig:
    controller: JobsController
    manager: FakeManager
    workers: FakeWorkers
    events: FakeEvents
    ledger: Ledger
    scheduling: SchedulingLoop
    clock: FakeClock
    trainjobs: FakeCache
    queue: FakeQueue

    @property
    def memory(self) -> JobMemory:
        return self.controller.memories.of(UID)

    async def execute(self, snapshot: Snapshot, action: a.Action) -> Result | None:
        return await self.controller.execute(snapshot, self.memory, action)


def rig(*snapshots: Snapshot) -> Rig:
    ledger, clock = Ledger(), FakeClock()
    scheduling = SchedulingLoop(ledger=ledger, workers=list, policy=PlacementPolicy.MOST_FREE,
                                strategy=QueueingStrategy.BEST_EFFORT_FIFO,
                                on_decision=lambda decision: None)
    manager, workers, events = FakeManager(), FakeWorkers(), FakeEvents()
    trainjobs, records, queue = FakeCache(), FakeRecords(), FakeQueue()
    reader = FakeReader(*(snapshots or (claimed(),)))
    registry = FakeRegistry()
    bookkeeper = Bookkeeper(kind=KIND, origin="o", ledger=ledger, scheduling=scheduling,
                            trainjobs=trainjobs, records=records, reader=reader)
    controller = JobsController(
        config=CONFIG, claim=Claim(CONFIG.claim), kind=KIND, registry=registry,
        ledger=ledger, scheduling=scheduling, trainjobs=trainjobs, records=records,
        reader=reader, manager=manager, workers=workers, bookkeeper=bookkeeper,
        queue=queue, events=events, metrics=Metrics(), clock=clock)
    return Rig(controller, manager, workers, events, ledger, scheduling, clock, trainjobs,
               queue)


def entry() -> PendingJob:
    return PendingJob(key="ns/j", uid=UID, demand=DEMAND)


def reserve(r: Rig, worker: str = "w") -> None:
    """The scheduler placed the job on `worker`: its demand is booked, not yet recorded."""
    r.ledger.book(Booking(UID, "ns/j", worker, DEMAND))
    r.scheduling.reservations[UID] = worker


# ----- what each action does -----


async def test_idle_writes_nothing_and_the_news_is_taken() -> None:
    r = rig()
    r.memory.status_news = NOW - 1
    assert await r.execute(claimed(), a.Idle()) == Result.done()
    assert r.manager.calls == [] and r.memory.status_news is None


async def test_sync_status_copies_the_mirror_and_measures_the_news() -> None:
    r = rig()
    r.memory.status_news = NOW - 1
    action = a.SyncStatus("w", mirror(), message="running on worker w")
    assert await r.execute(claimed(), action) == Result.done()
    assert r.manager.calls == [("placed", c.REASON_PLACED, "running on worker w", NOW - 1)]
    assert r.memory.status_news is None
    recheck = dataclasses.replace(action, recheck=12.5)
    assert await r.execute(claimed(), recheck) == Result.after(12.5)


async def test_wait_withdraws_the_job_and_its_reservation_then_says_why() -> None:
    r = rig()
    r.scheduling.submit(entry())
    reserve(r)
    result = await r.execute(claimed(), a.Wait(c.REASON_SUSPENDED, "suspended: not dispatched"))
    assert result == Result.done()
    assert UID not in r.scheduling.pending and r.scheduling.reservation(UID) is None
    assert UID not in r.ledger
    assert r.manager.calls == [("waiting", c.REASON_SUSPENDED, "suspended: not dispatched", [])]


async def test_a_wait_the_job_is_at_fault_for_is_also_an_event_when_decided_so() -> None:
    r = rig()
    await r.execute(claimed(), a.Wait(c.REASON_INVALID_RESOURCES, "bad", warn=True))
    await r.execute(claimed(), a.Wait(c.REASON_INVALID_RESOURCES, "bad"))
    assert r.events.recorded == [(c.REASON_INVALID_RESOURCES, "bad", True)]


async def test_enqueue_offers_the_job_and_shows_the_schedulers_word_only_when_it_has_one(
) -> None:
    r = rig()
    assert await r.execute(claimed(), a.Enqueue(entry())) == Result.done()
    assert UID in r.scheduling.pending and r.manager.calls == []
    await r.execute(claimed(), a.Enqueue(entry(), reason=c.REASON_WAITING_FOR_QUOTA,
                                         message="no room (position 2 in the queue)"))
    assert r.manager.calls == [("waiting", c.REASON_WAITING_FOR_QUOTA,
                                "no room (position 2 in the queue)", [])]


async def test_record_placement_writes_the_record_then_the_view_and_keeps_the_booking(
) -> None:
    r = rig()
    reserve(r)
    r.memory.tombstone = ("w", mirror())
    r.memory.refused = Refusal("w", c.REASON_MIRROR_REJECTED, "no")
    assert await r.execute(claimed(), a.RecordPlacement("w", DEMAND)) is None
    assert r.manager.calls == [("record", "w", 0), ("view", "w")]
    assert r.scheduling.reservation(UID) is None and r.ledger.get(UID) is not None
    assert r.memory.tombstone is None and r.memory.refused is None


async def test_book_books_what_the_action_says() -> None:
    r = rig()
    bigger = {"cpu": Fraction(3), "pods": Fraction(1)}
    assert await r.execute(claimed(record=record()), a.Book("w", bigger)) is None
    booking = r.ledger.get(UID)
    assert booking is not None and (booking.worker, booking.demand) == ("w", bigger)


async def test_a_created_mirror_is_counted_and_announced() -> None:
    r = rig()
    r.memory.first_seen = NOW - 3
    assert await r.execute(claimed(record=record()), a.CreateMirror("w", DEMAND)) is None
    assert r.workers.calls == [("create", "w", DEMAND)]
    assert r.ledger.counts_mirror("w", UID) and r.memory.first_seen is None
    assert r.events.recorded == [(c.REASON_PLACED, "mirror created on worker w", False)]


async def test_a_refused_mirror_is_remembered_and_nothing_else_is_done() -> None:
    r = rig()
    r.workers.refusal = Refused(c.REASON_MIRROR_REJECTED, "w rejected the mirror: forbidden")
    assert await r.execute(claimed(record=record()), a.CreateMirror("w", DEMAND)) is None
    assert r.memory.refused == Refusal("w", c.REASON_MIRROR_REJECTED,
                                       "w rejected the mirror: forbidden")
    assert r.manager.calls == [] and r.events.recorded == []


async def test_a_worker_gone_since_the_decision_is_decided_again() -> None:
    r = rig()
    r.controller.registry.workers["w"].is_usable = False
    assert await r.execute(claimed(record=record()), a.CreateMirror("w", DEMAND)) is None
    unplace = a.Unplace("w", c.REASON_DRAINED, "drained; requeued", eviction=True,
                        mirror=mirror())
    assert await r.execute(claimed(record=record()), unplace) is None
    assert r.workers.calls == [] and r.manager.calls == []


async def test_reject_keeps_the_job_off_the_worker_and_takes_it_off() -> None:
    r = rig()
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    r.memory.refused = Refusal("w", c.REASON_NAME_CONFLICT, "taken")
    action = a.Reject("w", c.REASON_NAME_CONFLICT, "ns/j on w is not a mirror of this job")
    assert await r.execute(claimed(record=record()), action) is None
    assert r.manager.calls == [("record", "", 0), ("view", ""), (
        "waiting", c.REASON_NAME_CONFLICT, "ns/j on w is not a mirror of this job", [])]
    assert UID not in r.ledger and r.memory.refused is None
    assert r.manager.written[-1].excluded == {"w": EPOCH + 30}
    assert r.events.recorded == [(c.REASON_NAME_CONFLICT,
                                  "ns/j on w is not a mirror of this job", True)]


async def test_an_eviction_deletes_the_mirror_first_then_requeues_after_the_backoff() -> None:
    r = rig()
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    r.ledger.mirror_seen("w", UID, "ns/j", DEMAND)
    action = a.Unplace("w", c.REASON_MIRROR_EVICTED, "evicted on worker w; requeued",
                       eviction=True, event_reason=c.REASON_EVICTED, count_requeue=True,
                       evictions=3, fail=True, backoff=8.0, mirror=mirror())
    result = await r.execute(claimed(record=record(evictions=2)), action)
    assert result == Result.after(8.0)
    assert r.workers.calls == [("delete", "w", "m-1")]
    assert r.manager.calls == [("record", "", 3), ("view", ""), (
        "waiting", c.REASON_MIRROR_EVICTED, "evicted on worker w; requeued",
        [c.REASON_TOO_MANY_EVICTIONS])]
    assert UID not in r.ledger and not r.ledger.counts_mirror("w", UID)
    assert r.memory.deleted_mirrors == {"m-1"}
    assert r.manager.written[-1].not_before == EPOCH + 8.0
    assert r.events.recorded == [(c.REASON_EVICTED, "evicted on worker w; requeued", True)]


async def test_the_record_says_not_placed_before_the_mirror_is_deleted() -> None:
    """A delete that fails (or a crash at that point) comes after the record: a restart
    finds a job not placed and a live mirror the ledger counts and the GC deletes, never
    a placement without its mirror, which would be made again."""
    r = rig()
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    r.ledger.mirror_seen("w", UID, "ns/j", DEMAND)
    r.workers.fail = True
    action = a.Unplace("w", c.REASON_MIRROR_EVICTED, "evicted on worker w; requeued",
                       eviction=True, event_reason=c.REASON_EVICTED, count_requeue=True,
                       evictions=1, backoff=2.0, mirror=mirror())
    with pytest.raises(RuntimeError):
        await r.execute(claimed(record=record()), action)
    assert r.manager.calls == [("record", "", 1)]
    assert r.manager.written[-1].not_before == EPOCH + 2.0
    assert UID not in r.ledger and r.ledger.counts_mirror("w", UID)  # still counted


async def test_taking_a_suspended_job_off_is_no_eviction() -> None:
    r = rig()
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    action = a.Unplace("w", c.REASON_SUSPENDED, "suspended", eviction=False)
    assert await r.execute(claimed(record=record()), action) == Result.done()
    assert r.workers.calls == []  # no mirror to delete: its worker was given up on
    assert r.events.recorded == [] and UID not in r.ledger
    assert r.manager.written[-1].not_before == 0.0 and not r.manager.written[-1].excluded


async def test_an_admission_timeout_moves_the_job_and_keeps_it_off_that_worker() -> None:
    r = rig()
    action = a.Unplace("w", c.REASON_ADMISSION_TIMEOUT, "not admitted", eviction=False,
                       event_reason=c.REASON_ADMISSION_TIMEOUT, count_requeue=True,
                       exclude=True, mirror=mirror())
    assert await r.execute(claimed(record=record()), action) == Result.after(0.0)
    assert r.manager.written[-1].excluded == {"w": EPOCH + 30}
    assert r.events.recorded == [(c.REASON_ADMISSION_TIMEOUT, "not admitted", True)]


async def test_finish_writes_the_end_and_releases_the_quota_at_once() -> None:
    r = rig()
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    failed = condition("Failed", "NodeLost", "node died")
    result = await r.execute(claimed(record=record()), a.Finish("w", mirror(), failed))
    assert result == Result.after(0)
    assert r.manager.calls == [("placed", c.REASON_FINISHED, "Failed on worker w", None)]
    assert UID not in r.ledger
    assert r.events.recorded == [(c.REASON_FINISHED, "Failed on worker w: NodeLost", True)]


async def test_hold_keeps_the_placement_and_shows_why() -> None:
    r = rig()
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    action = a.Hold("w", c.REASON_WORKER_UNREACHABLE, "kept there")
    assert await r.execute(claimed(record=record()), action) == Result.done()
    assert r.manager.calls == [("held", c.REASON_WORKER_UNREACHABLE, "kept there")]
    assert r.ledger.get(UID) is not None


async def test_a_deleted_mirror_s_own_delete_event_is_no_news() -> None:
    r = rig()
    r.trainjobs.store["ns/j"] = job()
    r.ledger.mirror_seen("w", UID, "ns/j", DEMAND)
    assert await r.execute(claimed(record=record()), a.DeleteMirror("w", mirror())) is None
    assert not r.ledger.counts_mirror("w", UID) and r.memory.deleted_mirrors == {"m-1"}
    r.controller.on_mirror_event("w", DELETED, mirror())
    assert r.memory.tombstone is None and r.memory.deleted_mirrors == set()
    r.controller.on_mirror_event("w", DELETED, mirror(uid="m-2"))  # someone else's delete
    assert r.memory.tombstone == ("w", mirror(uid="m-2"))


async def test_a_delete_that_fails_is_not_taken_for_ours() -> None:
    r = rig()
    r.workers.fail = True
    with pytest.raises(RuntimeError):
        await r.execute(claimed(record=record()), a.DeleteMirror("w", mirror()))
    assert r.memory.deleted_mirrors == set()


async def test_delete_record_releases_the_quota_and_tells_a_job_no_longer_claimed() -> None:
    r = rig()
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    unclaimed = trainjob("j", "ns")
    snapshot = Absent(key="ns/j", now=NOW, unclaimed=unclaimed,
                      leftover=Leftover(record(), ACTIVE))
    assert await r.execute(snapshot, a.DeleteRecord(record(), unclaimed=unclaimed)) is None
    assert r.manager.calls == [("delete record", UID)] and UID not in r.ledger
    assert r.events.recorded == [(c.REASON_NOT_CLAIMED, "no longer claimed by this dispatcher: "
                                  "its mirror on worker w was deleted", True)]


async def test_drop_finalizer_decides_again_unless_the_job_is_gone() -> None:
    r = rig()
    assert await r.execute(claimed(), a.DropFinalizer(job())) is None
    r.manager.gone = True
    assert await r.execute(claimed(), a.DropFinalizer(job())) == Result.done()


async def test_forget_drops_the_queue_entry_and_the_memory() -> None:
    r = rig()
    r.scheduling.submit(entry())
    r.memory.first_seen = NOW
    assert await r.execute(claimed(), a.Forget()) == Result.done()
    assert UID not in r.scheduling.pending and r.controller.memories.get(UID) is None
    r.memory.first_seen = NOW  # a job we knew, no longer claimed
    assert await r.execute(Absent(key="ns/j", now=NOW, unclaimed=job()), a.Forget()) == (
        Result.done())
    assert r.controller.memories.get(UID) is None


async def test_an_action_on_a_claimed_job_needs_a_claimed_snapshot() -> None:
    r = rig()
    with pytest.raises(AssertionError):
        await r.execute(Absent(key="ns/j", now=NOW), a.Wait(c.REASON_SUSPENDED, "x"))


# ----- the reconcile loop: snapshot -> decide -> execute until a final action -----


async def test_a_refused_mirror_is_rejected_and_requeued_in_one_reconcile() -> None:
    placed = claimed(job=job(annotations={c.ANNOTATION_CLUSTER: "w",
                                          c.ANNOTATION_DEMAND: "cpu=2,pods=1"}),
                     record=record(), booked=True, worker=ACTIVE)
    placed.job["metadata"]["finalizers"] = [c.FINALIZER]
    taken_off = dataclasses.replace(record(worker=""), excluded={"w": EPOCH + 30},
                                    taken_off=(c.REASON_MIRROR_REJECTED, "w rejected the mirror"))
    r = rig(placed, placed, claimed(record=taken_off))
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    r.workers.refusal = Refused(c.REASON_MIRROR_REJECTED, "w rejected the mirror")
    assert await r.controller.reconcile("ns/j") == Result.done()
    assert r.workers.calls == [("create", "w", DEMAND)]
    assert r.manager.calls == [("record", "", 0), ("view", ""),
                               ("waiting", c.REASON_MIRROR_REJECTED, "w rejected the mirror", [])]
    assert r.manager.written == [taken_off]
    assert r.scheduling.pending[UID].excluded == frozenset({"w"})


async def test_a_conflict_on_the_view_loses_neither_the_exclusion_nor_the_backoff() -> None:
    """The record (with the requeue state) is written before the job's view: a 409 on
    the view goes back to the key's backoff, and what the record holds still decides."""
    r = rig()
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    r.manager.view_conflict = True
    action = a.Unplace("w", c.REASON_MIRROR_EVICTED, "preempted on worker w; requeued",
                       eviction=True, event_reason=c.REASON_EVICTED, count_requeue=True,
                       exclude=True, backoff=8.0)
    with pytest.raises(Conflict):
        await r.execute(claimed(record=record()), action)
    written = r.manager.written[-1]
    assert (written.worker, written.not_before, written.excluded) == (
        "", EPOCH + 8.0, {"w": EPOCH + 30})
    assert UID not in r.ledger
    assert r.events.recorded == [(c.REASON_EVICTED, "preempted on worker w; requeued", True)]
    # What decides next is the record, read back: in backoff, then off worker w.
    after = claimed(job=job(), record=written, wall=EPOCH + 1, now=NOW + 1)
    assert decide(after, JobMemory(), CONFIG, kind=KIND) == a.Requeue(7.0)
    later = dataclasses.replace(after, wall=EPOCH + 9, now=NOW + 9)
    queued = decide(later, JobMemory(), CONFIG, kind=KIND)
    assert isinstance(queued, a.Enqueue) and queued.entry.excluded == frozenset({"w"})


async def test_a_conflict_goes_back_to_the_keys_backoff() -> None:
    r = rig(claimed(reservation="w"))
    reserve(r)
    r.manager.conflict = True
    assert await r.controller.reconcile("ns/j") == Result.retry()


async def test_the_demand_a_snapshot_computed_is_remembered() -> None:
    r = rig(claimed(demand_version=(1, "42"), verdict=None))
    await r.controller.reconcile("ns/j")
    assert r.memory.demand == ((1, "42"), DEMAND)


# ----- events: keys enqueued, facts recorded -----


def test_a_job_no_longer_claimed_that_we_knew_is_looked_at_again() -> None:
    r = rig()
    r.controller.on_job_event("MODIFIED", job())
    assert r.queue.added == [("ns/j", Lane.ORDINARY)] and r.memory.first_seen == NOW
    unlabelled = trainjob("j", "ns")  # managedBy removed: not claimed, but we knew it
    unlabelled["metadata"]["uid"] = UID
    r.controller.on_job_event("MODIFIED", unlabelled)
    assert len(r.queue.added) == 2
    stranger = trainjob("k", "ns")
    stranger["metadata"]["uid"] = "uid-2"
    r.controller.on_job_event("ADDED", stranger)
    assert len(r.queue.added) == 2 and r.controller.memories.get("uid-2") is None


def test_a_job_not_claimed_that_holds_our_finalizer_is_looked_at() -> None:
    """Ours to clean up (placed by an earlier version), though no longer claimed."""
    r = rig()
    former = trainjob("j", "ns")
    former["metadata"].update(uid=UID, finalizers=[c.FINALIZER])
    r.controller.on_job_event("MODIFIED", former)
    assert r.queue.added == [("ns/j", Lane.ORDINARY)]
    assert r.controller.memories.get(UID) is None  # nothing remembered of a job not claimed


def test_a_deleted_job_with_no_placed_record_is_released_at_once() -> None:
    r = rig()
    r.scheduling.submit(entry())
    reserve(r)
    r.controller.on_job_event(DELETED, job())
    assert UID not in r.scheduling.pending and UID not in r.ledger
    assert r.queue.added == [("ns/j", Lane.ORDINARY)]


def test_a_deleted_job_placed_on_record_keeps_its_quota_until_its_mirror_is_gone() -> None:
    r = rig()
    cast(FakeRecords, r.controller.records).records.append(record())
    r.ledger.book(Booking(UID, "ns/j", "w", DEMAND))
    r.controller.on_job_event(DELETED, job())
    assert r.ledger.get(UID) is not None and r.queue.added == [("ns/j", Lane.ORDINARY)]


async def test_the_clean_up_of_a_job_no_longer_claimed_uses_what_we_remember_of_it() -> None:
    """Its mirror deleted under the remembered memory: the DELETED event is known as ours."""
    unreachable = dataclasses.replace(ACTIVE, usable=False, lost_for=10.0)
    r = rig(Absent(key="ns/j", now=NOW, unclaimed=job(),
                   leftover=Leftover(record(), ACTIVE, mirror())),
            Absent(key="ns/j", now=NOW, unclaimed=job(),
                   leftover=Leftover(record(), unreachable)))
    r.memory.first_seen = NOW
    assert await r.controller.reconcile("ns/j") == Result.after(5.0)
    assert r.workers.calls == [("delete", "w", "m-1")]
    assert r.memory.deleted_mirrors == {"m-1"} and r.memory.first_seen == NOW
