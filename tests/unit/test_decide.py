"""The life of a job as a decision table: every arrow of docs/architecture.md, pure.

Each row builds the snapshot the controller would read from its caches at a given time
(and the job's memory, where it matters) and checks the one action `decide` returns; no
cluster, no clock but the snapshot's. The tables follow a job's life: what is left of
jobs we no longer hold, a pending job, a placed one and its mirror, its worker lost,
leaving, and what users may write versus what the record and the mirrors say.
"""

from __future__ import annotations

import dataclasses
import datetime
from fractions import Fraction
from typing import Any

import pytest

from devkit.factories import condition, trainjob
from dispatcher.api import constants as c
from dispatcher.api.placement import PlacementRecord
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE
from dispatcher.claim import Claim
from dispatcher.config import ClaimConfig, DispatcherConfig
from dispatcher.controllers.jobs import actions as a
from dispatcher.controllers.jobs.decide import (
    WAITING_QUIET_SECONDS,
    decide,
    explanation,
    orphan_reason,
)
from dispatcher.controllers.jobs.memory import JobMemory, Refusal
from dispatcher.controllers.jobs.priority import Priority
from dispatcher.controllers.jobs.snapshot import (
    Absent,
    Claimed,
    Copy,
    Leftover,
    Snapshot,
    WorkerState,
)
from dispatcher.controllers.scheduling import Preemptor, VerdictTimes
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.placement import resources
from dispatcher.placement.scheduler import Decision
from dispatcher.placement.validation import DemandError

KIND = TrainJobKind()
CONFIG = DispatcherConfig.model_validate({
    "mirror": {"origin": "o", "maxEvictions": 3, "requeueBackoffSeconds": 2,
               "retainFinishedSeconds": 0},
    "workers": {"lostTimeoutSeconds": 60, "probeIntervalSeconds": 5},
    "placement": {"admissionTimeoutSeconds": 120},
})
WALL = 1_780_000_000.0
"""Wall-clock time of every snapshot; mirrors are created `age` seconds before it."""
NOW = 1000.0
UID = "uid-1"
OLD_UID = "uid-0"
DEMAND = {"cpu": Fraction(2), "pods": Fraction(1)}
RUNTIME = {"kind": "ClusterTrainingRuntime", "metadata": {"name": "torch"}}
ACTIVE = WorkerState(name="w", usable=True, lost_for=None, draining=False, message="connected")
WITH_KUEUE = dataclasses.replace(ACTIVE, local_queue="team", cluster_queue="cq")
V = dataclasses.replace(ACTIVE, name="v")


def job(*, placed: bool = False, evictions: int = 0, deleting: bool = False,
        suspend: bool = False, status: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj = trainjob("j", "ns", suspend=suspend or None, annotations=dict(annotations or {}))
    obj["metadata"].update(uid=UID, resourceVersion="7", creationTimestamp="2026-12-02T00:00:00Z")
    meta_annotations = obj["metadata"].setdefault("annotations", {})
    if placed:  # the view of `record(worker="w")`
        meta_annotations[c.ANNOTATION_CLUSTER] = "w"
        meta_annotations[c.ANNOTATION_DEMAND] = resources.format_vector(DEMAND)
        obj["metadata"]["finalizers"] = [c.FINALIZER]
    if evictions:
        meta_annotations[c.ANNOTATION_EVICTIONS] = str(evictions)
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-12-02T00:01:00Z"
    if status:
        obj["status"] = status
    return obj


def mirror(*, uid: str = UID, origin: str = "o", status: dict[str, Any] | None = None,
           suspend: bool = False, age: float = 10.0) -> dict[str, Any]:
    body = KIND.build_mirror(job(), origin=origin, local_queue="")
    body["metadata"]["annotations"][c.ANNOTATION_MANAGER_UID] = uid
    body["metadata"]["uid"] = f"mirror-of-{uid}"
    body["metadata"]["creationTimestamp"] = datetime.datetime.fromtimestamp(
        WALL - age, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body["spec"]["suspend"] = suspend or None
    if status:
        body["status"] = status
    return body


def deleting_mirror() -> dict[str, Any]:
    body = mirror()
    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return body


def record(*, worker: str = "w", evictions: int = 0, uid: str = UID) -> PlacementRecord:
    return PlacementRecord(uid=uid, key="ns/j", worker=worker,
                           demand=dict(DEMAND) if worker else {}, evictions=evictions)


def record_viewed_by(obj: dict[str, Any]) -> PlacementRecord | None:
    """The record whose view `obj` carries (test rows keep job and record consistent)."""
    annotations = obj["metadata"].get("annotations") or {}
    worker = annotations.get(c.ANNOTATION_CLUSTER, "")
    evictions = int(annotations.get(c.ANNOTATION_EVICTIONS, "0"))
    if not worker and not evictions:
        return None
    return record(worker=worker, evictions=evictions)


def pending(**kw: Any) -> Claimed:
    fields: dict[str, Any] = dict(key="ns/j", now=NOW, wall=WALL, job=job(), runtime=RUNTIME,
                                  runtime_name="ClusterTrainingRuntime 'torch'", demand=DEMAND)
    fields.update(kw)
    if "record" not in kw:
        fields["record"] = record_viewed_by(fields["job"])
    return Claimed(**fields)


def placed(*, worker: WorkerState | None = ACTIVE, **kw: Any) -> Claimed:
    fields: dict[str, Any] = dict(job=job(placed=True), booked=True, worker=worker)
    fields.update(kw)
    return pending(**fields)


def absent(**kw: Any) -> Absent:
    return Absent(key="ns/j", now=NOW, wall=WALL, **kw)


def lost(seconds: float | None, *, usable: bool = False) -> WorkerState:
    return dataclasses.replace(ACTIVE, usable=usable, lost_for=seconds, message="timeout")


WHERE = "pods jobset.sigs.k8s.io/jobset-name=j; logs: dispatcher logs ns/j"
"""Where a started job's pods and logs are, as its status message says."""
COMPLETE = {"conditions": [condition("Complete", "AllJobsCompleted", "done")]}
FAILED = {"conditions": [condition("Failed", "NodeLost", "node died")]}
RUNNING = {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}
PODS_PENDING = {"jobsStatus": [{"name": "node", "active": 2, "ready": 0}]}
PREEMPTED = {"conditions": [condition("Suspended", "Preempted", "by a higher priority")],
             **RUNNING}
SHOWN_PLACED = {"conditions": [condition(c.CONDITION_DISPATCHED, c.REASON_PLACED,
                                         "running on worker w")]}
NO_QUOTA = ("couldn't assign flavors to pod set node: insufficient unused quota for cpu in "
            "flavor default, 1 more needed")
IN_BACKOFF = JobMemory()
"""In a row's memory column: the row's record is in eviction backoff for 3 more seconds,
so a job that reaches the queue answers Requeue(3.0): it did not get that far otherwise."""


def backed_off(snapshot: Snapshot) -> Snapshot:
    if not isinstance(snapshot, Claimed) or snapshot.record is None:
        return snapshot
    return dataclasses.replace(snapshot, record=dataclasses.replace(
        snapshot.record, not_before=WALL + 3))


def workload(*conditions: tuple[str, str, str, str]) -> dict[str, Any]:
    """A Kueue Workload with (type, status, reason, message) conditions."""
    return {"metadata": {"name": "trainjob-j-1", "namespace": "ns"},
            "status": {"conditions": [{"type": t, "status": st, "reason": r, "message": m}
                                      for t, st, r, m in conditions]}}


PENDING_WORKLOAD = workload(("QuotaReserved", "False", "Pending", NO_QUOTA))
ADMITTED_WORKLOAD = workload(("QuotaReserved", "True", "QuotaReserved", "reserved"),
                             ("Admitted", "True", "Admitted", "admitted"))
PREEMPTED_WORKLOAD = workload(
    ("QuotaReserved", "False", "Pending", "Preempted"),
    ("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: x) due to "
                                     "prioritization in the ClusterQueue"))
TIMED_OUT_WORKLOAD = workload(("Evicted", "True", "PodsReadyTimeout", "pods not ready in 5m"))


def table(*rows: tuple[Any, ...]) -> dict[str, Any]:
    """pytest parameters from rows of (name, snapshot, expected) or (name, snapshot,
    memory, expected)."""
    full = [(r[0], r[1], JobMemory(), r[2]) if len(r) == 3
            else (r[0], backed_off(r[1]), JobMemory(), r[3]) if r[2] is IN_BACKOFF else r
            for r in rows]
    return {"argvalues": [r[1:] for r in full], "ids": [r[0] for r in full]}


def check(snapshot: Snapshot, memory: JobMemory, expected: a.Action,
          config: DispatcherConfig = CONFIG) -> None:
    assert decide(snapshot, memory, config, kind=KIND) == expected


ARGS = ("snapshot", "memory", "expected")
EVICTION: dict[str, Any] = {"eviction": True, "event_reason": c.REASON_EVICTED,
                            "count_requeue": True}
"""An eviction: counted, a Warning event Evicted, requeued after its backoff."""


def unclaimed_dropped(why: str) -> a.DropFinalizer:
    """Our finalizer dropped from a placed job no longer claimed, the event saying `why`."""
    return a.DropFinalizer(job(placed=True), reason=c.REASON_NOT_CLAIMED,
                           message=f"no longer claimed by this dispatcher: finalizer "
                                   f"{c.FINALIZER} dropped; {why}")


@pytest.mark.parametrize(ARGS, **table(
    ("gone", absent(), a.Forget()),
    ("not claimed", absent(unclaimed=job()), a.Forget()),
    ("placed by an earlier version (no record), no longer claimed: its mirror goes first",
     absent(unclaimed=job(placed=True), hinted_worker=ACTIVE, hinted_mirror=mirror()),
     a.DeleteMirror("w", mirror())),
    ("the same, the object there is not ours (another origin): left alone",
     absent(unclaimed=job(placed=True), hinted_worker=ACTIVE,
            hinted_mirror=mirror(origin="someone")),
     unclaimed_dropped("the object of its name on worker w is not its mirror")),
    ("the same, the object there is another job's: left alone",
     absent(unclaimed=job(placed=True), hinted_worker=ACTIVE,
            hinted_mirror=mirror(uid=OLD_UID)),
     unclaimed_dropped("the object of its name on worker w is not its mirror")),
    ("the same, its mirror being deleted: the finalizer is dropped (the ledger counts the "
     "mirror while it lives)",
     absent(unclaimed=job(placed=True), hinted_worker=ACTIVE, hinted_mirror=deleting_mirror()),
     unclaimed_dropped("its mirror on worker w is being deleted")),
    ("the same, its mirror gone: the finalizer is dropped and the job told why",
     absent(unclaimed=job(placed=True), hinted_worker=ACTIVE),
     unclaimed_dropped("no mirror of it is left on worker w")),
    ("the same, its worker unreachable: waited for",
     absent(unclaimed=job(placed=True), hinted_worker=lost(10), hinted_mirror=mirror()),
     a.Requeue(5.0)),
    ("the same, its worker lost past the timeout: given up on (the GC cleans up)",
     absent(unclaimed=job(placed=True), hinted_worker=lost(61)),
     unclaimed_dropped(
         "worker w is lost (its garbage collector deletes a mirror left there once it answers)")),
    ("the same, its worker not registered: the finalizer is dropped",
     absent(unclaimed=job(placed=True)), unclaimed_dropped("worker w is not registered")),
    ("the same, deleted at once: the same clean-up",
     absent(unclaimed=job(placed=True, deleting=True), hinted_worker=ACTIVE,
            hinted_mirror=mirror()), a.DeleteMirror("w", mirror())),
    ("job deleted without our finalizer: its mirror is deleted at once",
     absent(leftover=Leftover(record(uid=OLD_UID), ACTIVE, mirror(uid=OLD_UID))),
     a.DeleteMirror("w", mirror(uid=OLD_UID))),
    ("job deleted, its mirror gone: the record goes",
     absent(leftover=Leftover(record(uid=OLD_UID), ACTIVE)),
     a.DeleteRecord(record(uid=OLD_UID))),
    ("job deleted, its worker unreachable: the record waits (its quota stays booked)",
     absent(leftover=Leftover(record(uid=OLD_UID), lost(10))), a.Requeue(5.0)),
    ("job deleted, its worker given up on: the record goes",
     absent(leftover=Leftover(record(uid=OLD_UID), lost(61))),
     a.DeleteRecord(record(uid=OLD_UID))),
    ("job deleted, its worker no longer registered: the record goes",
     absent(leftover=Leftover(record(uid=OLD_UID))), a.DeleteRecord(record(uid=OLD_UID))),
    ("job re-created under the same name: the old one's mirror goes first",
     pending(leftover=Leftover(record(uid=OLD_UID), ACTIVE, mirror(uid=OLD_UID))),
     a.DeleteMirror("w", mirror(uid=OLD_UID))),
    ("a placed job no longer claimed (its label removed): its mirror goes first",
     absent(unclaimed=job(placed=True), leftover=Leftover(record(), ACTIVE, mirror())),
     a.DeleteMirror("w", mirror())),
    ("job no longer claimed, mirror gone: our finalizer is dropped before the record",
     absent(unclaimed=job(placed=True), leftover=Leftover(record(), ACTIVE)),
     a.DropFinalizer(job(placed=True))),
    ("job no longer claimed, finalizer dropped: the record goes and the job is told why",
     absent(unclaimed=job(), leftover=Leftover(record(), ACTIVE)),
     a.DeleteRecord(record(), unclaimed=job())),
    ("job no longer claimed after an eviction: the record goes, nothing to tell",
     absent(unclaimed=job(evictions=1), leftover=Leftover(record(worker="", evictions=1))),
     a.DeleteRecord(record(worker="", evictions=1))),
))
def test_what_is_left_of_jobs_we_no_longer_hold(snapshot: Snapshot, memory: JobMemory,
                                                expected: a.Action) -> None:
    check(snapshot, memory, expected)


@pytest.mark.parametrize(ARGS, **table(
    ("wait: suspended", pending(job=job(suspend=True)),
     a.Wait(c.REASON_SUSPENDED, "suspended: not dispatched")),
    ("wait: runtime missing", pending(runtime=None, demand=None),
     a.Wait(c.REASON_RUNTIME_NOT_FOUND, "ClusterTrainingRuntime 'torch' does not exist on "
            "the manager; the job is placed once it does")),
    ("wait: invalid resources",
     pending(demand=None, demand_error=DemandError("spec.trainer.numNodes: 0 must be at "
                                                   "least 1", reason=c.REASON_INVALID_RESOURCES)),
     a.Wait(c.REASON_INVALID_RESOURCES,
            "not dispatched: spec.trainer.numNodes: 0 must be at least 1", warn=True)),
    ("wait: eviction backoff", pending(record=record(worker="")), IN_BACKOFF, a.Requeue(3.0)),
    ("place: reserved", pending(reservation="w"), a.RecordPlacement("w", DEMAND)),
    ("place: reserved on a worker whose runtime makes it bigger: booked as it is there",
     pending(reservation="w", demand_on={"w": {"cpu": Fraction(6)}}),
     a.RecordPlacement("w", {"cpu": Fraction(6)})),
))
def test_a_pending_job(snapshot: Snapshot, memory: JobMemory, expected: a.Action) -> None:
    check(snapshot, memory, expected)


def test_queue_entry_carries_priority_order_and_current_exclusions() -> None:
    excluding = dataclasses.replace(record(worker=""), excluded={"w": WALL + 10, "v": WALL - 1})
    memory = JobMemory()
    action = decide(pending(priority=Priority(7), record=excluding), memory, CONFIG, kind=KIND)
    assert isinstance(action, a.Enqueue)
    entry = action.entry
    assert (entry.key, entry.uid, entry.demand, entry.priority) == ("ns/j", UID, DEMAND, 7)
    assert entry.created == "2026-12-02T00:00:00Z"
    assert entry.excluded == frozenset({"w"})
    assert (action.reason, action.message) == ("", "")  # the scheduler has not looked yet
    # The same record ten seconds later: the worker is offered the job again.
    later = decide(pending(now=NOW + 10, wall=WALL + 10, record=excluding), memory, CONFIG,
                   kind=KIND)
    assert isinstance(later, a.Enqueue) and later.entry.excluded == frozenset()


def test_a_queued_job_shows_the_schedulers_last_word_and_its_place() -> None:
    verdict = Decision("ns/j", UID, None, c.REASON_WAITING_FOR_QUOTA,
                       "no worker has 2 cpu free; best: w with 1", position=3)
    action = decide(pending(verdict=verdict), JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, a.Enqueue)
    assert (action.reason, action.message) == (
        c.REASON_WAITING_FOR_QUOTA,
        "no worker has 2 cpu free; best: w with 1 (position 3 in the queue)")
    unschedulable = dataclasses.replace(verdict, reason=c.REASON_UNSCHEDULABLE, position=0,
                                        message="needs 100 cpu")
    action = decide(pending(verdict=unschedulable), JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, a.Enqueue) and action.message == "needs 100 cpu"


def _waiting_shown(message: str) -> dict[str, Any]:
    return job(status={"conditions": [condition(
        c.CONDITION_DISPATCHED, c.REASON_WAITING_FOR_QUOTA, message, status="False")]})


def test_a_wait_for_quota_is_shown_once_it_has_lasted_the_quiet_period() -> None:
    """Most jobs of a burst are placed within seconds: their wait is not written."""
    verdict = Decision("ns/j", UID, None, c.REASON_WAITING_FOR_QUOTA,
                       "no worker has 2 cpu free; best: w with 1")
    fresh = VerdictTimes(since=WALL - 0.5, waiting_since=WALL - 0.5)
    action = decide(pending(verdict=verdict, verdict_times=fresh), JobMemory(), CONFIG,
                    kind=KIND)
    assert isinstance(action, a.Enqueue) and action.reason == c.REASON_WAITING_FOR_QUOTA
    assert action.show_after == pytest.approx(WAITING_QUIET_SECONDS - 0.5, abs=0.1)
    # The numbers changed since, but the wait itself has lasted long enough: shown.
    lasted = VerdictTimes(since=WALL - 0.1, waiting_since=WALL - WAITING_QUIET_SECONDS)
    action = decide(pending(verdict=verdict, verdict_times=lasted), JobMemory(), CONFIG,
                    kind=KIND)
    assert isinstance(action, a.Enqueue) and action.show_after is None
    # Other reasons are shown at once.
    unschedulable = dataclasses.replace(verdict, reason=c.REASON_UNSCHEDULABLE)
    action = decide(pending(verdict=unschedulable, verdict_times=fresh), JobMemory(),
                    CONFIG, kind=KIND)
    assert isinstance(action, a.Enqueue) and action.show_after is None


def test_new_numbers_under_the_reason_shown_wait_until_they_have_stood() -> None:
    """While quota churns the reason on the job stays right; its numbers follow once
    they hold still for the quiet period."""
    verdict = Decision("ns/j", UID, None, c.REASON_WAITING_FOR_QUOTA,
                       "no worker has 2 cpu free; best: w with 1")
    shown_before = _waiting_shown("no worker has 2 cpu free; best: w with 0")
    churning = VerdictTimes(since=WALL - 0.5, waiting_since=WALL - 60)
    action = decide(pending(job=shown_before, verdict=verdict, verdict_times=churning),
                    JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, a.Enqueue)
    assert action.show_after == pytest.approx(WAITING_QUIET_SECONDS - 0.5, abs=0.1)
    stood = VerdictTimes(since=WALL - WAITING_QUIET_SECONDS, waiting_since=WALL - 60)
    action = decide(pending(job=shown_before, verdict=verdict, verdict_times=stood),
                    JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, a.Enqueue) and action.show_after is None
    # Already shown as it is: nothing to hold (the write is a no-op).
    shown_now = _waiting_shown(verdict.message)
    action = decide(pending(job=shown_now, verdict=verdict, verdict_times=churning),
                    JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, a.Enqueue) and action.show_after is None


def test_a_reason_the_job_is_at_fault_for_is_an_event_once() -> None:
    """The Warning event goes with the first time the status says so, not every
    reconcile after."""
    error = DemandError("spec.trainer.numNodes: 0 must be at least 1",
                        reason=c.REASON_INVALID_RESOURCES)
    first = decide(pending(demand=None, demand_error=error), JobMemory(), CONFIG, kind=KIND)
    assert isinstance(first, a.Wait) and first.warn
    shown = {"conditions": [condition(c.CONDITION_DISPATCHED, first.reason, first.message,
                                      "False")]}
    again = decide(pending(job=job(status=shown), demand=None, demand_error=error),
                   JobMemory(), CONFIG, kind=KIND)
    assert again == dataclasses.replace(first, warn=False)


def test_an_unparsable_cluster_selector_is_its_own_reason() -> None:
    snapshot = pending(job=job(annotations={c.ANNOTATION_CLUSTER_SELECTOR: "gpu in (a"}))
    action = decide(snapshot, JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, a.Wait) and action.warn
    assert action.reason == c.REASON_INVALID_CLUSTER_SELECTOR
    assert action.message.startswith(
        f"not dispatched: annotation {c.ANNOTATION_CLUSTER_SELECTOR}: cannot parse")


@pytest.mark.parametrize(ARGS, **table(
    # booked and mirrored
    ("placed after a restart: book it", placed(booked=False), a.Book("w", DEMAND)),
    ("placed after a restart, its runtime grew since: booked at what it needs now",
     placed(booked=False, demand={"cpu": Fraction(3), "pods": Fraction(1)}),
     a.Book("w", {"cpu": Fraction(3), "pods": Fraction(1)})),
    ("mirror: create", placed(), a.CreateMirror("w", DEMAND)),
    ("mirror: the worker's runtime still gives the booked demand: create",
     placed(demand_there=DEMAND), a.CreateMirror("w", DEMAND)),
    ("mirror: the worker's runtime changed since the booking: placed again, not an eviction",
     placed(demand_there={"cpu": Fraction(4), "pods": Fraction(2)}),
     a.Unplace("w", c.REASON_RUNTIME_CHANGED,
               "the ClusterTrainingRuntime 'torch' of worker w changed after the job was "
               "booked there: it needs cpu=4,pods=2 there, not the cpu=2,pods=1 booked; "
               "placed again", eviction=False, event_reason=c.REASON_RUNTIME_CHANGED,
               count_requeue=True)),
    ("mirror: the worker's runtime is gone since the booking: placed again",
     placed(cannot_run_there="has no ClusterTrainingRuntime 'torch'"),
     a.Unplace("w", c.REASON_RUNTIME_CHANGED,
               "worker w has no ClusterTrainingRuntime 'torch' (its runtime changed after "
               "the job was booked there); placed again", eviction=False,
               event_reason=c.REASON_RUNTIME_CHANGED, count_requeue=True)),
    ("mirror: the worker refused the one just asked for: rejected with its reason",
     placed(), JobMemory(refused=Refusal("w", c.REASON_MIRROR_REJECTED, "w rejected it")),
     a.Reject("w", c.REASON_MIRROR_REJECTED, "w rejected it")),
    ("mirror: a refusal by another worker is old news: create",
     placed(), JobMemory(refused=Refusal("v", c.REASON_MIRROR_REJECTED, "v rejected it")),
     a.CreateMirror("w", DEMAND)),
    ("reject: the name is taken by someone else", placed(mirror=mirror(uid="other")),
     a.Reject("w", c.REASON_NAME_CONFLICT, "ns/j on w is not a mirror of this job")),
    # status
    ("sync: copy status", placed(mirror=mirror(status=RUNNING)),
     a.SyncStatus("w", mirror(status=RUNNING), message=f"running on worker w ({WHERE})")),
    ("sync: pods made but none ready (no node holds them yet): not called running",
     placed(mirror=mirror(status=PODS_PENDING)),
     a.SyncStatus("w", mirror(status=PODS_PENDING),
                  message=f"on worker w, waiting for its pods to run there ({WHERE})")),
    ("sync: a mirror with no status yet, the job shows nothing either: nothing to tell",
     placed(mirror=mirror()), a.Idle()),
    ("sync: a mirror with no status, the job shows it placed: kept in step",
     placed(job=job(placed=True, status=SHOWN_PLACED), mirror=mirror()),
     a.SyncStatus("w", mirror(),
                  message=f"on worker w, waiting for its pods to run there ({WHERE})")),
    # admission by the worker's Kueue
    ("admission: waiting, Kueue says why",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True), workload=PENDING_WORKLOAD),
     a.SyncStatus("w", mirror(suspend=True), reason=c.REASON_WAITING_FOR_ADMISSION,
                  message=f"placed on worker w, waiting for admission in ClusterQueue cq: "
                          f"{NO_QUOTA}", recheck=110.05)),
    ("admission: a new mirror's first steps are not written",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, age=1),
            workload=PENDING_WORKLOAD), a.Requeue(1.05)),
    ("admission: waiting before Kueue made a Workload",
     placed(worker=dataclasses.replace(ACTIVE, local_queue="team"),
            mirror=mirror(suspend=True, age=3)),
     a.SyncStatus("w", mirror(suspend=True, age=3), reason=c.REASON_WAITING_FOR_ADMISSION,
                  message="placed on worker w, waiting for admission in LocalQueue team: the "
                          "worker's Kueue has not created its Workload yet", recheck=117.05)),
    ("admission: not admitted in time, moved (not an eviction)",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, age=121),
            workload=PENDING_WORKLOAD),
     a.Unplace("w", c.REASON_ADMISSION_TIMEOUT, f"not admitted by the Kueue of worker w in "
               f"121s ({NO_QUOTA}); placed again elsewhere", eviction=False,
               event_reason=c.REASON_ADMISSION_TIMEOUT, count_requeue=True, exclude=True,
               mirror=mirror(suspend=True, age=121))),
    ("admission: admitted, running",
     placed(worker=WITH_KUEUE, mirror=mirror(status=RUNNING), workload=ADMITTED_WORKLOAD),
     a.SyncStatus("w", mirror(status=RUNNING), message=f"running on worker w ({WHERE})")),
    ("admission: admitted, not yet unsuspended",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True), workload=ADMITTED_WORKLOAD),
     a.SyncStatus("w", mirror(suspend=True), reason=c.REASON_WAITING_FOR_ADMISSION,
                  message="placed on worker w, waiting for admission in ClusterQueue cq: "
                          "admitted; starting", recheck=110.05)),
    # finish
    ("finish: mirror complete", placed(mirror=mirror(status=COMPLETE)),
     a.Finish("w", mirror(status=COMPLETE), COMPLETE["conditions"][0])),
    ("finish: complete mirror deleted by a TTL", placed(tombstone=mirror(status=COMPLETE)),
     a.Finish("w", mirror(status=COMPLETE), COMPLETE["conditions"][0])),
    ("finish: a failure the job does not retry", placed(mirror=mirror(status=FAILED)),
     a.Finish("w", mirror(status=FAILED), FAILED["conditions"][0])),
    # evict: the mirror is deleted first
    ("evict: mirror deleted under the job", placed(tombstone=mirror()),
     a.Unplace("w", c.REASON_MIRROR_GONE, "the mirror on worker w was deleted; requeued",
               **EVICTION, evictions=1, backoff=2.0)),
    ("evict: suspended by the worker after it started",
     placed(mirror=mirror(status=PREEMPTED)),
     a.Unplace("w", c.REASON_MIRROR_EVICTED, "evicted on worker w: by a higher priority; "
               "requeued", **EVICTION, evictions=1, backoff=2.0,
               mirror=mirror(status=PREEMPTED))),
    ("evict: preempted by the worker's Kueue, not counted, worker avoided",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, status=RUNNING),
            workload=PREEMPTED_WORKLOAD),
     a.Unplace("w", c.REASON_MIRROR_EVICTED, "evicted on worker w by its Kueue (Preempted): "
               "Preempted to accommodate a workload (UID: x) due to prioritization in the "
               "ClusterQueue; requeued", **EVICTION, exclude=True,
               mirror=mirror(suspend=True, status=RUNNING))),
    ("evict: the worker's Kueue evicted it for its own fault, counted",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True), workload=TIMED_OUT_WORKLOAD),
     a.Unplace("w", c.REASON_MIRROR_EVICTED, "evicted on worker w by its Kueue "
               "(PodsReadyTimeout): pods not ready in 5m; requeued", **EVICTION,
               evictions=1, backoff=2.0, mirror=mirror(suspend=True))),
    ("evict: a failure the job retries",
     placed(job=job(placed=True, annotations={c.ANNOTATION_RETRY_ON_REASONS: "NodeLost"}),
            mirror=mirror(status=FAILED)),
     a.Unplace("w", c.REASON_RETRYING_FAILURE, "failed on worker w with NodeLost, which the "
               "job retries; requeued", **EVICTION, evictions=1, backoff=2.0,
               mirror=mirror(status=FAILED))),
    ("evict: third time fails the job",
     placed(job=job(placed=True, evictions=2), tombstone=mirror()),
     a.Unplace("w", c.REASON_MIRROR_GONE, "the mirror on worker w was deleted; requeued",
               **EVICTION, evictions=3, fail=True, backoff=8.0)),
    ("evict: drained, not counted",
     placed(worker=dataclasses.replace(ACTIVE, draining=True), mirror=mirror(status=RUNNING)),
     a.Unplace("w", c.REASON_DRAINED, "worker w is being drained; requeued", **EVICTION,
               mirror=mirror(status=RUNNING))),
    # suspended while placed: taken off, not an eviction; the mirror goes first
    ("suspended while placed: taken off, not an eviction",
     placed(job=job(placed=True, suspend=True), mirror=mirror(status=RUNNING)),
     a.Unplace("w", c.REASON_SUSPENDED, "suspended: mirror removed and quota released",
               eviction=False, mirror=mirror(status=RUNNING))),
    ("suspended, its worker unreachable but not lost: wait, the mirror must go first",
     placed(job=job(placed=True, suspend=True), worker=lost(None)), a.Requeue(5.0)),
    ("suspended, its worker lost: taken off, its mirror given up on",
     placed(job=job(placed=True, suspend=True), worker=lost(10)),
     a.Unplace("w", c.REASON_SUSPENDED, "suspended: mirror removed and quota released",
               eviction=False)),
    ("suspended, its worker no longer registered: taken off",
     placed(job=job(placed=True, suspend=True), worker=None),
     a.Unplace("w", c.REASON_SUSPENDED, "suspended: mirror removed and quota released",
               eviction=False)),
))
def test_a_placed_job_and_its_mirror(snapshot: Snapshot, memory: JobMemory,
                                     expected: a.Action) -> None:
    check(snapshot, memory, expected)


@pytest.mark.parametrize(ARGS, **table(
    ("worker lost past the timeout: evict, the mirror given up on", placed(worker=lost(75)),
     a.Unplace("w", c.REASON_WORKER_LOST, "worker w lost for 75s (timeout); requeued",
               **EVICTION, evictions=1)),
    ("worker unregistered: evict", placed(worker=None),
     a.Unplace("w", c.REASON_WORKER_LOST, "worker w is no longer registered; requeued",
               **EVICTION, evictions=1)),
    ("blip: lost for 20 of 60 s, wait out the rest", placed(worker=lost(20)),
     a.Requeue(40.05)),
    ("blip: inactive, not lost (no network loss)", placed(worker=lost(None)), a.Requeue(5.0)),
))
def test_a_placed_job_whose_worker_is_lost(snapshot: Snapshot, memory: JobMemory,
                                           expected: a.Action) -> None:
    check(snapshot, memory, expected)


@pytest.mark.parametrize(ARGS, **table(
    ("finished on the manager: mirror deleted first",
     placed(job=job(placed=True, status=COMPLETE), mirror=mirror(status=COMPLETE)),
     a.DeleteMirror("w", mirror(status=COMPLETE))),
    ("finished on the manager, mirror gone: the record goes",
     placed(job=job(placed=True, status=COMPLETE)), a.DeleteRecord(record())),
    ("finished on the manager, record gone: finalizer dropped",
     pending(job=job(placed=True, status=COMPLETE), record=None),
     a.DropFinalizer(job(placed=True, status=COMPLETE))),
    ("finished, never placed: forget", pending(job=job(status=COMPLETE)), a.Forget()),
    ("delete: mirror first", placed(job=job(placed=True, deleting=True), mirror=mirror()),
     a.DeleteMirror("w", mirror())),
    ("delete: then the record", placed(job=job(placed=True, deleting=True)),
     a.DeleteRecord(record())),
    ("delete: then the finalizer", pending(job=job(placed=True, deleting=True), record=None),
     a.DropFinalizer(job(placed=True, deleting=True))),
    ("delete after an eviction: the record goes", pending(job=job(evictions=1, deleting=True)),
     a.DeleteRecord(record(worker="", evictions=1))),
    ("delete: worker unreachable, not yet given up",
     placed(job=job(placed=True, deleting=True), worker=lost(10)), a.Requeue(5.0)),
    ("delete: worker lost past the timeout is given up on",
     placed(job=job(placed=True, deleting=True), worker=lost(61)), a.DeleteRecord(record())),
    ("delete while pending: forget", pending(job=job(deleting=True)), a.Forget()),
))
def test_a_job_that_leaves(snapshot: Snapshot, memory: JobMemory, expected: a.Action) -> None:
    check(snapshot, memory, expected)


def test_keep_finished_leaves_the_mirror() -> None:
    keep = CONFIG.model_copy(update={"mirror": CONFIG.mirror.model_copy(
        update={"keep_finished": True})})
    snapshot = placed(job=job(placed=True, status=COMPLETE), mirror=mirror(status=COMPLETE))
    check(snapshot, JobMemory(), a.DeleteRecord(record()), keep)


RETAIN = CONFIG.model_copy(update={"mirror": CONFIG.mirror.model_copy(
    update={"retain_finished_seconds": 600.0})})


def finished_mirror(*, ago: float, uid: str = UID) -> dict[str, Any]:
    """A mirror that completed on its worker `ago` seconds before the snapshot."""
    done = condition("Complete", "AllJobsCompleted", "done")
    done["lastTransitionTime"] = datetime.datetime.fromtimestamp(
        WALL - ago, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return mirror(uid=uid, status={"conditions": [done]})


def retained(mirror_obj: dict[str, Any] | None, *, deleting: bool = False,
             worker: WorkerState = ACTIVE) -> Claimed:
    """Finished on the manager, its record gone, our finalizer and annotation kept."""
    finished = job(placed=True, status=COMPLETE, deleting=deleting)
    return pending(job=finished, record=None, hinted_worker=worker,
                   hinted_mirror=mirror_obj)


@pytest.mark.parametrize(ARGS, **table(
    ("finished, mirror retained: the record goes (quota released), the mirror stays",
     placed(job=job(placed=True, status=COMPLETE), mirror=finished_mirror(ago=5)),
     a.DeleteRecord(record())),
    ("retained, time left: looked at again when it is up",
     retained(finished_mirror(ago=100)), a.Requeue(500.0 + 0.05)),
    ("retained past its time: the mirror goes", retained(finished_mirror(ago=700)),
     a.DeleteMirror("w", finished_mirror(ago=700))),
    ("retained, the job deleted: the mirror goes at once",
     retained(finished_mirror(ago=100), deleting=True),
     a.DeleteMirror("w", finished_mirror(ago=100))),
    ("retained mirror gone: the finalizer goes", retained(None),
     a.DropFinalizer(job(placed=True, status=COMPLETE))),
    ("the object there is not this job's mirror: never deleted",
     retained(finished_mirror(ago=700, uid=OLD_UID)),
     a.DropFinalizer(job(placed=True, status=COMPLETE))),
    ("retained on a worker unreachable for a while: waited for",
     retained(None, worker=lost(10)), a.Requeue(5.0)),
    ("retained on a worker lost past the timeout: given up on (the GC's)",
     retained(None, worker=lost(61)),
     a.DropFinalizer(job(placed=True, status=COMPLETE))),
))
def test_a_finished_mirror_is_retained_for_its_time(
        snapshot: Snapshot, memory: JobMemory, expected: a.Action) -> None:
    check(snapshot, memory, expected, RETAIN)


def test_keep_finished_keeps_a_retained_mirror_until_the_job_is_deleted() -> None:
    keep = CONFIG.model_copy(update={"mirror": CONFIG.mirror.model_copy(
        update={"keep_finished": True})})
    check(retained(finished_mirror(ago=86_400)), JobMemory(), a.Idle(), keep)
    check(retained(finished_mirror(ago=86_400), deleting=True), JobMemory(),
          a.DeleteMirror("w", finished_mirror(ago=86_400)), keep)


def test_an_unfinished_mirror_of_a_finished_job_is_not_retained() -> None:
    snapshot = placed(job=job(placed=True, status=COMPLETE), mirror=mirror(status=RUNNING))
    check(snapshot, JobMemory(), a.DeleteMirror("w", mirror(status=RUNNING)), RETAIN)


@pytest.mark.parametrize(("ago", "orphan"), [
    (100, None),
    (700, "its manager TrainJob has finished and mirror.retainFinishedSeconds is up"),
])
def test_the_collector_keeps_a_retained_mirror_for_its_time(ago: float,
                                                            orphan: str | None) -> None:
    assert orphan_reason(finished_mirror(ago=ago), _claimed_job(status=COMPLETE), None,
                         worker="w", claim=Claim(ClaimConfig()), kind=KIND,
                         config=RETAIN.mirror, wall=WALL) == orphan


def test_without_an_admission_timeout_a_mirror_waits_forever() -> None:
    forever = CONFIG.model_copy(update={"placement": CONFIG.placement.model_copy(
        update={"admission_timeout_seconds": 0})})
    snapshot = placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, age=86_400),
                      workload=PENDING_WORKLOAD)
    action = decide(snapshot, JobMemory(), forever, kind=KIND)
    assert isinstance(action, a.SyncStatus)
    assert action.reason == c.REASON_WAITING_FOR_ADMISSION and action.recheck is None


WAIT_WHEN_LOST = DispatcherConfig.model_validate({
    **CONFIG.model_dump(by_alias=True),
    "workers": {"lostTimeoutSeconds": 60, "probeIntervalSeconds": 5, "whenLost": "Wait"},
})


def test_when_lost_wait_holds_the_job_on_its_worker_past_the_timeout() -> None:
    since = datetime.datetime.fromtimestamp(WALL - 75, datetime.UTC)
    check(placed(worker=lost(75)), JobMemory(), a.Hold(
        "w", c.REASON_WORKER_UNREACHABLE,
        f"worker w unreachable since {since:%Y-%m-%dT%H:%M:%SZ} (timeout); kept there "
        "(workers.whenLost: Wait) as a copy may still run on it: it moves once the worker "
        "answers without it, or is drained or removed"), WAIT_WHEN_LOST)


def test_when_lost_wait_the_held_message_stays_the_same_while_the_worker_stays_lost() -> None:
    first = decide(placed(worker=lost(75)), JobMemory(), WAIT_WHEN_LOST, kind=KIND)
    later = decide(placed(worker=lost(375), wall=WALL + 300), JobMemory(), WAIT_WHEN_LOST,
                   kind=KIND)
    assert first == later


@pytest.mark.parametrize(ARGS, **table(
    ("blip: wait out the timeout", placed(worker=lost(20)), a.Requeue(40.05)),
    ("inactive, not lost", placed(worker=lost(None)), a.Requeue(5.0)),
    ("drained by an admin: moves", placed(worker=dataclasses.replace(lost(75), draining=True)),
     a.Unplace("w", c.REASON_DRAINED, "worker w is unreachable and being drained; requeued",
               **EVICTION)),
    ("removed: moves", placed(worker=None),
     a.Unplace("w", c.REASON_WORKER_LOST, "worker w is no longer registered; requeued",
               **EVICTION, evictions=1)),
    ("deleted on the manager: given up on",
     placed(job=job(placed=True, deleting=True), worker=lost(61)), a.DeleteRecord(record())),
))
def test_when_lost_wait_other_rows_are_unchanged(snapshot: Snapshot, memory: JobMemory,
                                                 expected: a.Action) -> None:
    check(snapshot, memory, expected, WAIT_WHEN_LOST)


def edited(obj: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    obj["metadata"]["annotations"].update(annotations)
    return obj


def stray(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-12-02T00:00:00Z"}}


@pytest.mark.parametrize(ARGS, **table(
    # what a user can write on the job is a view of the record, never the truth
    ("a placed job's cluster annotation moved by a user: rewritten, not moved",
     placed(job=edited(job(placed=True), {c.ANNOTATION_CLUSTER: "v"}), record=record()),
     IN_BACKOFF,
     a.RewriteView((f"annotation {c.ANNOTATION_CLUSTER} was 'v', the record says 'w'",))),
    ("a placed job's finalizer stripped: put back",
     placed(job=dict(job(placed=True), metadata=dict(job(placed=True)["metadata"],
                                                      finalizers=[])), record=record()),
     IN_BACKOFF, a.RewriteView((f"finalizer {c.FINALIZER} was missing on a placed job",))),
    ("a new job with a forged placement and finalizer: stripped, then queued",
     pending(job=job(placed=True, evictions=0), record=None), IN_BACKOFF,
     a.RewriteView((
         f"annotation {c.ANNOTATION_CLUSTER} was 'w', the record has none",
         f"annotation {c.ANNOTATION_DEMAND} was 'cpu=2,pods=1', the record has none",
         f"finalizer {c.FINALIZER} was set on a job that is not placed"))),
    ("an eviction count reset by a user: rewritten",
     pending(job=job(), record=record(worker="", evictions=2)), IN_BACKOFF,
     a.RewriteView((f"annotation {c.ANNOTATION_EVICTIONS} was None, the record says '2'",))),
    ("the eviction count is the record's",
     placed(job=job(placed=True, evictions=2), tombstone=mirror()), IN_BACKOFF,
     a.Unplace("w", c.REASON_MIRROR_GONE, "the mirror on worker w was deleted; requeued",
               **EVICTION, evictions=3, fail=True, backoff=8.0)),
    # live mirrors are facts
    ("a live mirror with no record (an earlier version's placement): adopted",
     pending(job=job(placed=True), record=None,
             elsewhere=(Copy(ACTIVE, mirror(status=RUNNING), DEMAND),)), IN_BACKOFF,
     a.Adopt("w", DEMAND)),
    ("an adopted mirror holding more than the job needs now: booked at what it holds",
     pending(job=job(placed=True), record=None,
             elsewhere=(Copy(ACTIVE, mirror(), {"cpu": Fraction(4)}),)), IN_BACKOFF,
     a.Adopt("w", {"cpu": Fraction(4), "pods": Fraction(1)})),
    ("a live mirror of an evicted job is not adopted (the GC deletes it)",
     pending(job=job(evictions=1), elsewhere=(Copy(ACTIVE, mirror(), DEMAND),)), IN_BACKOFF,
     a.Requeue(3.0)),
    ("an earlier version's placement on a worker not read yet: wait for its mirrors",
     pending(job=job(placed=True), record=None, hinted_worker=lost(None)), IN_BACKOFF,
     a.Requeue(5.0)),
    ("an earlier version's placement on a worker given up on: stripped, then queued",
     pending(job=job(placed=True), record=None, hinted_worker=lost(61)), IN_BACKOFF,
     a.RewriteView((
         f"annotation {c.ANNOTATION_CLUSTER} was 'w', the record has none",
         f"annotation {c.ANNOTATION_DEMAND} was 'cpu=2,pods=1', the record has none",
         f"finalizer {c.FINALIZER} was set on a job that is not placed"))),
    ("a mirror on an unreachable worker is not adopted (the job waits its turn)",
     pending(record=record(worker=""), elsewhere=(Copy(lost(10), None),)), IN_BACKOFF,
     a.Requeue(3.0)),
    ("placed, a stray live copy on another reachable worker: deleted first",
     placed(elsewhere=(Copy(V, mirror(), DEMAND),)), IN_BACKOFF, a.DeleteMirror("v", mirror())),
    ("placed, a stray copy being deleted: wait for it to go",
     placed(elsewhere=(Copy(V, stray(mirror()), DEMAND),)), IN_BACKOFF, a.Requeue(5.0)),
    ("placed, a copy on an unreachable worker does not block the mirror",
     placed(elsewhere=(Copy(dataclasses.replace(lost(61), name="v"), None),)), IN_BACKOFF,
     a.CreateMirror("w", DEMAND)),
))
def test_the_record_and_the_mirrors_decide_never_the_jobs_annotations(
        snapshot: Snapshot, memory: JobMemory, expected: a.Action) -> None:
    check(snapshot, memory, expected)


def _claimed_job(**kw: Any) -> dict[str, Any]:
    obj = job(**kw)
    obj["spec"]["managedBy"] = MANAGED_BY_MULTIKUEUE
    return obj


@pytest.mark.parametrize(("why", "job_obj", "rec", "mirror_obj", "orphan"), [
    ("the job is gone", None, record(), mirror(), "its manager TrainJob is gone"),
    ("the job was re-created", _claimed_job(), record(), mirror(uid=OLD_UID),
     "its manager TrainJob was re-created"),
    ("placed here", _claimed_job(placed=True), record(), mirror(), None),
    ("placed elsewhere", _claimed_job(), record(worker="x"), mirror(),
     "its job is placed on worker x"),
    ("released (evicted, suspended)", _claimed_job(), record(worker=""), mirror(),
     "its manager TrainJob is not placed"),
    ("finished", _claimed_job(status=COMPLETE), None, mirror(),
     "its manager TrainJob has finished"),
    ("no record, not claimed", job(), None, mirror(),
     "its manager TrainJob is not claimed by this dispatcher (nothing adopts it)"),
    ("no record, claimed and live: decide adopts it", _claimed_job(), None, mirror(), None),
])
def test_a_mirror_is_an_orphan_exactly_when_no_row_keeps_it(
        why: str, job_obj: dict[str, Any] | None, rec: PlacementRecord | None,
        mirror_obj: dict[str, Any], orphan: str | None) -> None:
    assert orphan_reason(mirror_obj, job_obj, rec, worker="w", claim=Claim(ClaimConfig()),
                         kind=KIND, config=CONFIG.mirror, wall=WALL) == orphan, why


# ----- explanation: why a job waits, as others ask it (the admission check) -----


def test_the_explanation_is_the_decisions_words_then_the_records_take_off() -> None:
    taken_off = dataclasses.replace(record(worker=""), not_before=WALL + 60,
                                    taken_off=(c.REASON_EVICTED, "evicted on worker w"))
    waiting = pending(record=taken_off)
    action = decide(waiting, JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, a.Requeue), "in its backoff: no words of its own"
    assert explanation(waiting, action) == (c.REASON_EVICTED, "evicted on worker w")
    assert explanation(waiting, a.Wait(c.REASON_SUSPENDED, "suspended")) == (
        c.REASON_SUSPENDED, "suspended")
    queued = decide(pending(), JobMemory(), CONFIG, kind=KIND)
    assert isinstance(queued, a.Enqueue) and not queued.reason
    assert explanation(pending(), queued) is None, "the scheduler has not looked at it yet"
    said = dataclasses.replace(queued, reason=c.REASON_WAITING_FOR_QUOTA, message="no room")
    assert explanation(pending(), said) == (c.REASON_WAITING_FOR_QUOTA, "no room")
    assert explanation(absent(), a.Forget()) is None


# ----- preempted: taken off for a job of higher priority, unless it finished -----


def test_a_victim_is_taken_off_without_counting_an_eviction_unless_it_finished() -> None:
    victim = placed(mirror=mirror(), record=dataclasses.replace(record(), priority=1),
                    preempted_by=Preemptor("ns/urgent", 100, "w"))
    action = decide(victim, JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, a.Unplace), action
    assert (action.reason, action.eviction, action.evictions, action.backoff) == (
        c.REASON_PREEMPTED, False, None, 0.0)
    assert action.count_requeue and action.preemptor == "ns/urgent"
    assert action.mirror is not None, "its mirror goes: its pods end"
    assert "by ns/urgent (priority 100, above this job's 1)" in action.message
    assert "on worker w" in action.message
    done = dataclasses.replace(victim, mirror=mirror(status=COMPLETE))
    assert isinstance(decide(done, JobMemory(), CONFIG, kind=KIND), a.Finish)



def _since(seconds_ago: float) -> str:
    return datetime.datetime.fromtimestamp(WALL - seconds_ago, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def test_each_new_word_of_the_workers_kueue_is_shown_once_it_has_stood_the_quiet_period(
) -> None:
    """A burst's Workloads pass Kueue's steps in seconds: each would be one more manager
    status write. A step is shown once it has stood 2 s (its lastTransitionTime), so a
    long wait still shows Kueue's current word."""
    def waiting(word: str, since: str) -> Claimed:
        workload_ = workload(("QuotaReserved", "False", "Pending", word))
        workload_["status"]["conditions"][0]["lastTransitionTime"] = since
        return placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, age=30),
                      workload=workload_)

    fresh = decide(waiting(NO_QUOTA, _since(1)), JobMemory(), CONFIG, kind=KIND)
    assert fresh == a.Requeue(1.05)
    stood = decide(waiting(NO_QUOTA, _since(2)), JobMemory(), CONFIG, kind=KIND)
    assert isinstance(stood, a.SyncStatus) and NO_QUOTA in stood.message
    skewed = decide(waiting(NO_QUOTA, _since(-60)), JobMemory(), CONFIG, kind=KIND)
    assert skewed == a.Requeue(2.05), "a clock ahead of ours never holds it longer"
    admitted = workload(("QuotaReserved", "True", "QuotaReserved", "reserved"),
                        ("Admitted", "True", "Admitted", "admitted"))
    admitted["status"]["conditions"][1]["lastTransitionTime"] = _since(0)
    starting = placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, age=30),
                      workload=admitted)
    assert decide(starting, JobMemory(), CONFIG, kind=KIND) == a.Requeue(2.05)
