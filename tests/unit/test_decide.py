"""The life of a job as a decision table: every arrow of docs/architecture.md, pure.

Each row builds the snapshot the controller would read from its caches at a given time
and checks the one action `decide` returns; no cluster, no clock but the snapshot's.
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
from dispatcher.config import DispatcherConfig
from dispatcher.controllers.jobs import decide as d
from dispatcher.controllers.jobs.memory import JobMemory
from dispatcher.controllers.jobs.snapshot import JobSnapshot, WorkerState
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.placement import resources
from dispatcher.placement.validation import DemandError

KIND = TrainJobKind()
CONFIG = DispatcherConfig.model_validate({
    "mirror": {"origin": "o", "maxEvictions": 3, "requeueBackoffSeconds": 2},
    "workers": {"lostTimeoutSeconds": 60, "probeIntervalSeconds": 5},
    "placement": {"admissionTimeoutSeconds": 120},
})
WALL = 1_780_000_000.0
"""Wall-clock time of every snapshot; mirrors are created `age` seconds before it."""
NOW = 1000.0
UID = "uid-1"
DEMAND = {"cpu": Fraction(2), "pods": Fraction(1)}
RUNTIME = {"kind": "ClusterTrainingRuntime", "metadata": {"name": "torch"}}
ACTIVE = WorkerState(name="w", usable=True, lost_for=None, draining=False, message="connected")
WITH_KUEUE = dataclasses.replace(ACTIVE, local_queue="team", cluster_queue="cq")


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
    body["metadata"]["creationTimestamp"] = datetime.datetime.fromtimestamp(
        WALL - age, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body["spec"]["suspend"] = suspend or None
    if status:
        body["status"] = status
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


def pending(**kw: Any) -> JobSnapshot:
    fields: dict[str, Any] = dict(key="ns/j", now=NOW, wall=WALL, job=job(), claimed=True,
                                  runtime=RUNTIME, runtime_name="ClusterTrainingRuntime 'torch'",
                                  demand=DEMAND)
    fields.update(kw)
    if "record" not in kw:
        fields["record"] = record_viewed_by(fields["job"])
    return JobSnapshot(**fields)


def placed(*, worker: WorkerState | None = ACTIVE, **kw: Any) -> JobSnapshot:
    fields: dict[str, Any] = dict(job=job(placed=True), placed_on="w", booked=True,
                                  worker=worker)
    fields.update(kw)
    return pending(**fields)


def lost(seconds: float | None, *, usable: bool = False) -> WorkerState:
    return dataclasses.replace(ACTIVE, usable=usable, lost_for=seconds, message="timeout")


COMPLETE = {"conditions": [condition("Complete", "AllJobsCompleted", "done")]}
FAILED = {"conditions": [condition("Failed", "NodeLost", "node died")]}
RUNNING = {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}
PODS_PENDING = {"jobsStatus": [{"name": "node", "active": 2, "ready": 0}]}
PREEMPTED = {"conditions": [condition("Suspended", "Preempted", "by a higher priority")],
             **RUNNING}
NO_QUOTA = ("couldn't assign flavors to pod set node: insufficient unused quota for cpu in "
            "flavor default, 1 more needed")


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

ROWS: list[tuple[str, JobSnapshot, JobMemory, d.Action]] = [
    # gone / unclaimed
    ("gone", JobSnapshot(key="ns/j", now=NOW), JobMemory(), d.Forget()),
    ("not claimed", pending(claimed=False), JobMemory(), d.Forget()),
    # wait
    ("wait: suspended", pending(job=job(suspend=True)), JobMemory(),
     d.Wait(c.REASON_SUSPENDED, "suspended: not dispatched")),
    ("wait: runtime missing", pending(runtime=None, demand=None), JobMemory(),
     d.Wait(c.REASON_RUNTIME_NOT_FOUND, "ClusterTrainingRuntime 'torch' does not exist on "
            "the manager; the job is placed once it does")),
    ("wait: invalid resources",
     pending(demand=None, demand_error=DemandError("spec.trainer.numNodes: 0 must be at "
                                                   "least 1", reason=c.REASON_INVALID_RESOURCES)),
     JobMemory(), d.Wait(c.REASON_INVALID_RESOURCES,
                         "not dispatched: spec.trainer.numNodes: 0 must be at least 1",
                         warn=True)),
    ("wait: eviction backoff", pending(), JobMemory(not_before=NOW + 3), d.Requeue(3.0)),
    # place
    ("place: reserved", pending(reservation="w"), JobMemory(), d.RecordPlacement("w", DEMAND)),
    ("placed after a restart: book it", placed(booked=False), JobMemory(), d.Book("w")),
    # mirror and sync
    ("mirror: create", placed(), JobMemory(), d.CreateMirror("w")),
    ("sync: copy status", placed(mirror=mirror(status=RUNNING)), JobMemory(),
     d.SyncStatus("w", mirror(status=RUNNING), message="running on worker w")),
    ("sync: pods made but none ready (no node holds them yet): not called running",
     placed(mirror=mirror(status=PODS_PENDING)), JobMemory(),
     d.SyncStatus("w", mirror(status=PODS_PENDING),
                  message="on worker w, waiting for its pods to run there")),
    # admission by the worker's Kueue
    ("admission: waiting, Kueue says why",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True), workload=PENDING_WORKLOAD),
     JobMemory(),
     d.SyncStatus("w", mirror(suspend=True), reason=c.REASON_WAITING_FOR_ADMISSION,
                  message=f"placed on worker w, waiting for admission in ClusterQueue cq: "
                          f"{NO_QUOTA}", recheck=110.05)),
    ("admission: a new mirror's first steps are not written",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, age=1),
            workload=PENDING_WORKLOAD), JobMemory(), d.Requeue(1.05)),
    ("admission: waiting before Kueue made a Workload",
     placed(worker=dataclasses.replace(ACTIVE, local_queue="team"),
            mirror=mirror(suspend=True, age=3)), JobMemory(),
     d.SyncStatus("w", mirror(suspend=True, age=3), reason=c.REASON_WAITING_FOR_ADMISSION,
                  message="placed on worker w, waiting for admission in LocalQueue team: the "
                          "worker's Kueue has not created its Workload yet", recheck=117.05)),
    ("admission: not admitted in time, moved (not an eviction)",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, age=121),
            workload=PENDING_WORKLOAD), JobMemory(),
     d.Unplace("w", c.REASON_ADMISSION_TIMEOUT, f"not admitted by the Kueue of worker w in "
               f"121s ({NO_QUOTA}); placed again elsewhere", eviction=False, exclude=True)),
    ("admission: admitted, running",
     placed(worker=WITH_KUEUE, mirror=mirror(status=RUNNING), workload=ADMITTED_WORKLOAD),
     JobMemory(), d.SyncStatus("w", mirror(status=RUNNING), message="running on worker w")),
    ("admission: admitted, not yet unsuspended",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True), workload=ADMITTED_WORKLOAD),
     JobMemory(),
     d.SyncStatus("w", mirror(suspend=True), reason=c.REASON_WAITING_FOR_ADMISSION,
                  message="placed on worker w, waiting for admission in ClusterQueue cq: "
                          "admitted; starting", recheck=110.05)),
    ("evict: preempted by the worker's Kueue, not counted, worker avoided",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, status=RUNNING),
            workload=PREEMPTED_WORKLOAD), JobMemory(),
     d.Unplace("w", c.REASON_MIRROR_EVICTED, "evicted on worker w by its Kueue (Preempted): "
               "Preempted to accommodate a workload (UID: x) due to prioritization in the "
               "ClusterQueue; requeued", eviction=True, exclude=True)),
    ("evict: the worker's Kueue evicted it for its own fault, counted",
     placed(worker=WITH_KUEUE, mirror=mirror(suspend=True), workload=TIMED_OUT_WORKLOAD),
     JobMemory(),
     d.Unplace("w", c.REASON_MIRROR_EVICTED, "evicted on worker w by its Kueue "
               "(PodsReadyTimeout): pods not ready in 5m; requeued", eviction=True,
               evictions=1, backoff=2.0)),
    # finish
    ("finish: mirror complete", placed(mirror=mirror(status=COMPLETE)), JobMemory(),
     d.Finish("w", mirror(status=COMPLETE), COMPLETE["conditions"][0])),
    ("finish: complete mirror deleted by a TTL",
     placed(tombstone=mirror(status=COMPLETE)), JobMemory(),
     d.Finish("w", mirror(status=COMPLETE), COMPLETE["conditions"][0])),
    ("finished on the manager: mirror deleted first",
     placed(job=job(placed=True, status=COMPLETE), mirror=mirror(status=COMPLETE)),
     JobMemory(), d.DeleteMirror("w", UID)),
    ("finished on the manager, mirror gone: the record goes",
     placed(job=job(placed=True, status=COMPLETE)), JobMemory(), d.DeleteRecord(record())),
    ("finished on the manager, record gone: finalizer dropped",
     pending(job=job(placed=True, status=COMPLETE), record=None), JobMemory(),
     d.DropFinalizer()),
    ("finished, never placed: forget", pending(job=job(status=COMPLETE)), JobMemory(),
     d.Forget()),
    # evict
    ("evict: mirror deleted under the job", placed(tombstone=mirror()), JobMemory(),
     d.Unplace("w", c.REASON_MIRROR_GONE, "the mirror on worker w was deleted; requeued",
               eviction=True, evictions=1, backoff=2.0)),
    ("evict: preempted by the worker's Kueue", placed(mirror=mirror(status=PREEMPTED)),
     JobMemory(), d.Unplace("w", c.REASON_MIRROR_EVICTED,
                            "evicted on worker w: by a higher priority; requeued",
                            eviction=True, evictions=1, backoff=2.0)),
    ("evict: a failure the job retries",
     placed(job=job(placed=True, annotations={c.ANNOTATION_RETRY_ON_REASONS: "NodeLost"}),
            mirror=mirror(status=FAILED)), JobMemory(),
     d.Unplace("w", c.REASON_RETRYING_FAILURE, "failed on worker w with NodeLost, which the "
               "job retries; requeued", eviction=True, evictions=1, backoff=2.0)),
    ("finish: a failure the job does not retry", placed(mirror=mirror(status=FAILED)),
     JobMemory(), d.Finish("w", mirror(status=FAILED), FAILED["conditions"][0])),
    ("evict: third time fails the job",
     placed(job=job(placed=True, evictions=2), tombstone=mirror()), JobMemory(),
     d.Unplace("w", c.REASON_MIRROR_GONE, "the mirror on worker w was deleted; requeued",
               eviction=True, evictions=3, fail=True, backoff=8.0)),
    ("evict: drained, not counted", placed(worker=dataclasses.replace(ACTIVE, draining=True)),
     JobMemory(), d.Unplace("w", c.REASON_DRAINED, "worker w is being drained; requeued",
                            eviction=True)),
    ("suspended while placed: taken off, not an eviction",
     placed(job=job(placed=True, suspend=True)), JobMemory(),
     d.Unplace("w", c.REASON_SUSPENDED, "suspended: mirror removed and quota released",
               eviction=False)),
    # reject
    ("reject: the name is taken by someone else", placed(mirror=mirror(uid="other")),
     JobMemory(), d.Reject("w", c.REASON_NAME_CONFLICT, "ns/j on w is not a mirror of this job")),
    # delete
    ("delete: mirror first", placed(job=job(placed=True, deleting=True), mirror=mirror()),
     JobMemory(), d.DeleteMirror("w", UID)),
    ("delete: then the record", placed(job=job(placed=True, deleting=True)), JobMemory(),
     d.DeleteRecord(record())),
    ("delete: then the finalizer", pending(job=job(placed=True, deleting=True), record=None),
     JobMemory(), d.DropFinalizer()),
    ("delete after an eviction: the record goes",
     pending(job=job(evictions=1, deleting=True)), JobMemory(),
     d.DeleteRecord(record(worker="", evictions=1))),
    ("delete: worker unreachable, not yet given up",
     placed(job=job(placed=True, deleting=True), worker=lost(10)), JobMemory(), d.Requeue(5.0)),
    ("delete: worker lost past the timeout is given up on",
     placed(job=job(placed=True, deleting=True), worker=lost(61)), JobMemory(),
     d.DeleteRecord(record())),
    ("delete while pending: forget", pending(job=job(deleting=True)), JobMemory(), d.Forget()),
    # worker lost
    ("worker lost past the timeout: evict", placed(worker=lost(75)), JobMemory(),
     d.Unplace("w", c.REASON_WORKER_LOST, "worker w lost for 75s (timeout); requeued",
               eviction=True, evictions=1)),
    ("worker unregistered: evict", placed(worker=None), JobMemory(),
     d.Unplace("w", c.REASON_WORKER_LOST, "worker w is no longer registered; requeued",
               eviction=True, evictions=1)),
    # blip
    ("blip: lost for 20 of 60 s, wait out the rest", placed(worker=lost(20)), JobMemory(),
     d.Requeue(40.05)),
    ("blip: inactive, not lost (no network loss)", placed(worker=lost(None)), JobMemory(),
     d.Requeue(5.0)),
]


@pytest.mark.parametrize(("snapshot", "memory", "expected"),
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_decide(snapshot: JobSnapshot, memory: JobMemory, expected: d.Action) -> None:
    assert d.decide(snapshot, memory, CONFIG, kind=KIND) == expected


def test_queue_entry_carries_priority_order_and_current_exclusions() -> None:
    memory = JobMemory(excluded={"w": NOW + 10, "v": NOW - 1})
    action = d.decide(pending(priority=7), memory, CONFIG, kind=KIND)
    assert isinstance(action, d.Enqueue)
    entry = action.entry
    assert (entry.key, entry.uid, entry.demand, entry.priority) == ("ns/j", UID, DEMAND, 7)
    assert entry.created == "2026-12-02T00:00:00Z"
    assert entry.excluded == frozenset({"w"})
    # The same memory ten seconds later: the worker is offered the job again.
    later = d.decide(pending(now=NOW + 10), memory, CONFIG, kind=KIND)
    assert isinstance(later, d.Enqueue) and later.entry.excluded == frozenset()


def test_an_unparsable_cluster_selector_is_its_own_reason() -> None:
    snapshot = pending(job=job(annotations={c.ANNOTATION_CLUSTER_SELECTOR: "gpu in (a"}))
    action = d.decide(snapshot, JobMemory(), CONFIG, kind=KIND)
    assert isinstance(action, d.Wait) and action.warn
    assert action.reason == c.REASON_INVALID_CLUSTER_SELECTOR
    assert action.message.startswith(
        f"not dispatched: annotation {c.ANNOTATION_CLUSTER_SELECTOR}: cannot parse")


def test_keep_finished_leaves_the_mirror() -> None:
    keep = CONFIG.model_copy(update={"mirror": CONFIG.mirror.model_copy(
        update={"keep_finished": True})})
    snapshot = placed(job=job(placed=True, status=COMPLETE), mirror=mirror(status=COMPLETE))
    assert d.decide(snapshot, JobMemory(), keep, kind=KIND) == d.DeleteRecord(record())


def test_without_an_admission_timeout_a_mirror_waits_forever() -> None:
    forever = CONFIG.model_copy(update={"placement": CONFIG.placement.model_copy(
        update={"admission_timeout_seconds": 0})})
    snapshot = placed(worker=WITH_KUEUE, mirror=mirror(suspend=True, age=86_400),
                      workload=PENDING_WORKLOAD)
    action = d.decide(snapshot, JobMemory(), forever, kind=KIND)
    assert isinstance(action, d.SyncStatus)
    assert action.reason == c.REASON_WAITING_FOR_ADMISSION and action.recheck is None


WAIT_WHEN_LOST = DispatcherConfig.model_validate({
    **CONFIG.model_dump(by_alias=True),
    "workers": {"lostTimeoutSeconds": 60, "probeIntervalSeconds": 5, "whenLost": "Wait"},
})


def test_when_lost_wait_holds_the_job_on_its_worker_past_the_timeout() -> None:
    action = d.decide(placed(worker=lost(75)), JobMemory(), WAIT_WHEN_LOST, kind=KIND)
    since = datetime.datetime.fromtimestamp(WALL - 75, datetime.UTC)
    assert action == d.Hold(
        "w", c.REASON_WORKER_UNREACHABLE,
        f"worker w unreachable since {since:%Y-%m-%dT%H:%M:%SZ} (timeout); kept there "
        "(workers.whenLost: Wait) as a copy may still run on it: it moves once the worker "
        "answers without it, or is drained or removed")


def test_when_lost_wait_the_held_message_stays_the_same_while_the_worker_stays_lost() -> None:
    first = d.decide(placed(worker=lost(75)), JobMemory(), WAIT_WHEN_LOST, kind=KIND)
    later = d.decide(placed(worker=lost(375), wall=WALL + 300), JobMemory(), WAIT_WHEN_LOST,
                     kind=KIND)
    assert first == later


@pytest.mark.parametrize(("snapshot", "expected"), [
    (placed(worker=lost(20)), d.Requeue(40.05)),
    (placed(worker=lost(None)), d.Requeue(5.0)),
    (placed(worker=dataclasses.replace(lost(75), draining=True)),
     d.Unplace("w", c.REASON_DRAINED, "worker w is unreachable and being drained; requeued",
               eviction=True)),
    (placed(worker=None),
     d.Unplace("w", c.REASON_WORKER_LOST, "worker w is no longer registered; requeued",
               eviction=True, evictions=1)),
    (placed(job=job(placed=True, deleting=True), worker=lost(61)), d.DeleteRecord(record())),
], ids=["blip: wait out the timeout", "inactive, not lost", "drained by an admin: moves",
        "removed: moves", "deleted on the manager: given up on"])
def test_when_lost_wait_other_rows_are_unchanged(snapshot: JobSnapshot,
                                                 expected: d.Action) -> None:
    assert d.decide(snapshot, JobMemory(), WAIT_WHEN_LOST, kind=KIND) == expected


def edited(obj: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    obj["metadata"]["annotations"].update(annotations)
    return obj


V = dataclasses.replace(ACTIVE, name="v")
OLD_UID = "uid-0"
RECORD_ROWS: list[tuple[str, JobSnapshot, d.Action]] = [
    # what a user can write on the job is a view of the record, never the truth
    ("a placed job's cluster annotation moved by a user: rewritten, not moved",
     placed(job=edited(job(placed=True), {c.ANNOTATION_CLUSTER: "v"}), record=record()),
     d.RewriteView((f"annotation {c.ANNOTATION_CLUSTER} was 'v', the record says 'w'",))),
    ("a placed job's finalizer stripped: put back",
     placed(job=dict(job(placed=True), metadata=dict(job(placed=True)["metadata"],
                                                      finalizers=[])), record=record()),
     d.RewriteView((f"finalizer {c.FINALIZER} was missing on a placed job",))),
    ("a new job with a forged placement and finalizer: stripped, then queued",
     pending(job=job(placed=True, evictions=0), record=None),
     d.RewriteView((
         f"annotation {c.ANNOTATION_CLUSTER} was 'w', the record has none",
         f"annotation {c.ANNOTATION_DEMAND} was 'cpu=2,pods=1', the record has none",
         f"finalizer {c.FINALIZER} was set on a job that is not placed"))),
    ("an eviction count reset by a user: rewritten",
     pending(job=job(), record=record(worker="", evictions=2)),
     d.RewriteView((f"annotation {c.ANNOTATION_EVICTIONS} was None, the record says '2'",))),
    ("the eviction count is the record's",
     placed(job=job(placed=True, evictions=2), tombstone=mirror()),
     d.Unplace("w", c.REASON_MIRROR_GONE, "the mirror on worker w was deleted; requeued",
               eviction=True, evictions=3, fail=True, backoff=8.0)),
    # leftover records: the mirror goes first, the record (and the quota) last
    ("job deleted without our finalizer: its mirror is deleted at once",
     JobSnapshot(key="ns/j", now=NOW, leftover=record(uid=OLD_UID), leftover_worker=ACTIVE,
                 leftover_mirror=mirror(uid=OLD_UID)), d.DeleteMirror("w", OLD_UID)),
    ("job deleted, its mirror gone: the record goes",
     JobSnapshot(key="ns/j", now=NOW, leftover=record(uid=OLD_UID), leftover_worker=ACTIVE),
     d.DeleteRecord(record(uid=OLD_UID))),
    ("job deleted, its worker unreachable: the record waits (its quota stays booked)",
     JobSnapshot(key="ns/j", now=NOW, leftover=record(uid=OLD_UID), leftover_worker=lost(10)),
     d.Requeue(5.0)),
    ("job deleted, its worker given up on: the record goes",
     JobSnapshot(key="ns/j", now=NOW, leftover=record(uid=OLD_UID), leftover_worker=lost(61)),
     d.DeleteRecord(record(uid=OLD_UID))),
    ("job re-created under the same name: the old one's mirror goes first",
     pending(leftover=record(uid=OLD_UID), leftover_worker=ACTIVE,
             leftover_mirror=mirror(uid=OLD_UID)), d.DeleteMirror("w", OLD_UID)),
    ("job no longer claimed, mirror gone: our finalizer is dropped before the record",
     pending(job=job(placed=True), claimed=False, leftover=record(), leftover_worker=ACTIVE),
     d.DropFinalizer()),
    ("job no longer claimed, finalizer dropped: the record goes",
     pending(claimed=False, leftover=record(), leftover_worker=ACTIVE),
     d.DeleteRecord(record())),
    ("a finalizer on a job we do not claim is not ours to judge",
     pending(job=job(placed=True), claimed=False, record=None), d.Forget()),
    # live mirrors are facts
    ("a live mirror with no record (an earlier version's placement): adopted",
     pending(job=job(placed=True), record=None, elsewhere=(ACTIVE,),
             elsewhere_mirrors=(mirror(status=RUNNING),)), d.Adopt("w")),
    ("a live mirror of an evicted job is not adopted (the GC deletes it)",
     pending(job=job(evictions=1), elsewhere=(ACTIVE,), elsewhere_mirrors=(mirror(),)),
     d.Requeue(3.0)),
    ("an earlier version's placement on a worker not read yet: wait for its mirrors",
     pending(job=job(placed=True), record=None, hinted_worker=lost(None)), d.Requeue(5.0)),
    ("an earlier version's placement on a worker given up on: stripped, then queued",
     pending(job=job(placed=True), record=None, hinted_worker=lost(61)),
     d.RewriteView((
         f"annotation {c.ANNOTATION_CLUSTER} was 'w', the record has none",
         f"annotation {c.ANNOTATION_DEMAND} was 'cpu=2,pods=1', the record has none",
         f"finalizer {c.FINALIZER} was set on a job that is not placed"))),
    ("a mirror on an unreachable worker is not adopted (the job waits its turn)",
     pending(record=None, elsewhere=(lost(10),), elsewhere_mirrors=(None,)), d.Requeue(3.0)),
    ("placed, a stray live copy on another reachable worker: deleted first",
     placed(elsewhere=(V,), elsewhere_mirrors=(mirror(),)), d.DeleteMirror("v", UID)),
    ("placed, a stray copy being deleted: wait for it to go",
     placed(elsewhere=(V,), elsewhere_mirrors=(
         {**mirror(), "metadata": {**mirror()["metadata"],
                                   "deletionTimestamp": "2026-12-02T00:00:00Z"}},)),
     d.Requeue(5.0)),
    ("placed, a copy on an unreachable worker does not block the mirror",
     placed(elsewhere=(dataclasses.replace(lost(61), name="v"),), elsewhere_mirrors=(None,)),
     d.CreateMirror("w")),
]


@pytest.mark.parametrize(("snapshot", "expected"), [row[1:] for row in RECORD_ROWS],
                         ids=[row[0] for row in RECORD_ROWS])
def test_the_record_and_the_mirrors_decide_never_the_jobs_annotations(
        snapshot: JobSnapshot, expected: d.Action) -> None:
    in_backoff = JobMemory(not_before=NOW + 3)  # a job that reaches the queue says Requeue(3)
    assert d.decide(snapshot, in_backoff, CONFIG, kind=KIND) == expected
