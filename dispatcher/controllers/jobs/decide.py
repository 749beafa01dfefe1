"""The life of a job as one pure decision: `decide(snapshot, memory, config) -> Action`.

No I/O and no clock of its own: the snapshot carries the time it was read. Where a job
is placed is its Placement record's word (never its annotations or finalizer, which any
user who may edit the job can write), and a live mirror on a worker is a fact. The rows,
in the order they are tried (`docs/architecture.md` draws the same arrows):

- a leftover record of this name (its job gone, re-created or no longer claimed) ->
  delete its mirror (while the worker can be reached; a worker lost past the timeout is
  given up on), drop the finalizer of a job no longer claimed, then delete the record:
  its quota is released only then, once nothing runs;
- gone or not claimed -> forget it;
- deleted on the manager -> delete the mirror (while the worker can be reached), then
  the record, then drop the finalizer; a worker lost past the timeout is given up on
  (the GC cleans up);
- finished on the manager -> the same (the mirror is kept with `mirror.keepFinished`);
- no record, and a live mirror of the job on a reachable worker (left by an earlier
  version, which kept the placement in annotations) -> adopt it: record it there; no
  record, and the job's annotation and finalizer name a worker whose mirrors are not
  read yet -> wait for them (or for the worker to be given up on) before anything else,
  so an earlier version's mirror is adopted, never doubled;
- the job's view (annotations `cluster`, `demand`, `evictions`, the finalizer) differs
  from the record -> rewrite it from the record, and say so in an event;
- placed, not yet booked (after a restart) -> book it;
- placed, a live mirror of it on another reachable worker -> delete that one first
  (never two copies at once);
- placed and suspended -> take it off the worker (not an eviction);
- placed on a worker no longer registered -> evict (WorkerLost); lost past
  `workers.lostTimeoutSeconds` -> evict (WorkerLost), or with `workers.whenLost: Wait`
  hold it there and say so (a copy may still run on it), until the worker answers or
  is drained; lost for less -> wait; inactive but not lost (a blip) -> wait; a lost
  worker's jobs are placed again at once (no backoff: they are not at fault);
- placed on a draining worker -> evict, not counted toward `mirror.maxEvictions`;
- placed, no mirror: a tombstone that finished -> finish; one that did not -> evict
  (MirrorGone); none -> create the mirror;
- placed, the object there is not ours -> reject (NameConflict);
- placed, mirror finished: failed with a reason the job retries -> evict; else finish;
- placed, mirror evicted by the worker or its Kueue -> evict (MirrorEvicted; preempted
  is not counted toward `maxEvictions` and keeps the job off that worker a while);
- placed, mirror waiting for the worker's Kueue to admit it -> for its first
  `ADMISSION_QUIET_SECONDS` nothing is written (most mirrors are admitted by then, and
  each of Kueue's steps would be one more status write on the manager); after that show
  "waiting for admission" with Kueue's reason; past
  `placement.admissionTimeoutSeconds` -> take it off the worker (AdmissionTimeout, not
  an eviction) and keep the job off that worker a while; admitted -> copy its status
  ("running on X");
- not placed: suspended, runtime missing, demand or selector invalid -> wait with that
  reason; in eviction backoff -> wait until then; reserved by the scheduler -> record
  the placement; else queue it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.placement import PlacementRecord
from dispatcher.config import DispatcherConfig, WhenWorkerLost
from dispatcher.controllers.jobs.admission import (
    UNCOUNTED_EVICTIONS,
    Admission,
    Stage,
    admission_of,
)
from dispatcher.controllers.jobs.memory import JobMemory
from dispatcher.controllers.jobs.snapshot import (
    JobSnapshot,
    WorkerState,
    annotations_of,
    holds_finalizer,
)
from dispatcher.controllers.jobs.view import differences
from dispatcher.kinds import JobKind
from dispatcher.placement.scheduler import PendingJob
from dispatcher.placement.selector import SelectorError, parse_selector

JSON = dict[str, Any]
_BLIP_MARGIN_SECONDS = 0.05
ADMISSION_QUIET_SECONDS = 2.0
"""A new mirror's admission steps are not shown on the manager this long: Kueue usually
admits within it, and showing each step (no Workload yet, pending, quota reserved,
admitted) cost four status writes per job."""


@dataclass(frozen=True)
class Forget:
    """The job is out of the dispatcher's hands: drop its memory and queue entry."""


@dataclass(frozen=True)
class Requeue:
    seconds: float


@dataclass(frozen=True)
class Wait:
    """Not placed: withdraw it from the queue and show why."""

    reason: str
    message: str
    warn: bool = False


@dataclass(frozen=True)
class Enqueue:
    entry: PendingJob


@dataclass(frozen=True)
class RecordPlacement:
    worker: str
    demand: dict[str, Fraction]


@dataclass(frozen=True)
class Book:
    worker: str


@dataclass(frozen=True)
class CreateMirror:
    worker: str


@dataclass(frozen=True)
class SyncStatus:
    worker: str
    mirror: JSON
    reason: str = c.REASON_PLACED
    message: str = ""
    recheck: float | None = None
    """Decide again after this many seconds even without news (an admission timeout)."""


@dataclass(frozen=True)
class Hold:
    """Placed, and its worker cannot be asked: keep the placement and show why."""

    worker: str
    reason: str
    message: str


@dataclass(frozen=True)
class Finish:
    worker: str
    mirror: JSON
    finished: JSON


@dataclass(frozen=True)
class Unplace:
    """Take the job off its worker: the mirror deleted (if reachable), the placement
    and finalizer cleared; an eviction requeues it after `backoff`, and fails it once
    `evictions` reaches `mirror.maxEvictions`."""

    worker: str
    reason: str
    message: str
    eviction: bool
    evictions: int | None = None
    """The new eviction count to record; None when this one does not count."""
    fail: bool = False
    backoff: float = 0.0
    exclude: bool = False
    """Keep the job off this worker for `placement.rejectionBackoffSeconds` (and say so
    in an event)."""


@dataclass(frozen=True)
class Reject:
    worker: str
    reason: str
    message: str


@dataclass(frozen=True)
class DeleteMirror:
    worker: str
    uid: str
    """The manager UID the mirror must carry (a leftover's may not be the job's)."""


@dataclass(frozen=True)
class DeleteRecord:
    """The placement record goes (its mirror is gone or given up on): quota released."""

    record: PlacementRecord


@dataclass(frozen=True)
class Adopt:
    """A live mirror of the job runs on `worker` with no record of it: record it there."""

    worker: str


@dataclass(frozen=True)
class RewriteView:
    """The job's annotations or finalizer differ from its record: rewrite them."""

    differences: tuple[str, ...]


@dataclass(frozen=True)
class DropFinalizer:
    pass


Action = (Forget | Requeue | Wait | Enqueue | RecordPlacement | Book | CreateMirror
          | SyncStatus | Hold | Finish | Unplace | Reject | DeleteMirror | DeleteRecord
          | Adopt | RewriteView | DropFinalizer)


def decide(snapshot: JobSnapshot, memory: JobMemory, config: DispatcherConfig, *,
           kind: JobKind) -> Action:
    if snapshot.leftover is not None:
        return _clean_up(snapshot, config)
    job = snapshot.job
    if job is None or not snapshot.claimed:
        return Forget()
    if job["metadata"].get("deletionTimestamp") or kind.finished(job.get("status")):
        return _leave(snapshot, config, kind=kind)
    if snapshot.record is None:
        adoptable = _adoptable(snapshot, config, kind=kind)
        if adoptable is not None:
            return Adopt(adoptable)
        hint = snapshot.hinted_worker
        if hint is not None and not hint.usable and not _given_up(hint, config):
            return Requeue(config.workers.probe_interval_seconds)
    changed = differences(job, snapshot.record)
    if changed:
        return RewriteView(tuple(changed))
    if snapshot.placed_on is not None:
        return _placed(snapshot, config, kind=kind)
    return _pending(snapshot, memory)


def _clean_up(s: JobSnapshot, config: DispatcherConfig) -> Action:
    """A record whose job is gone, re-created or no longer claimed: its mirror first."""
    record = s.leftover
    assert record is not None
    if record.placed:
        worker = s.leftover_worker
        if worker is not None and worker.usable:
            if s.leftover_mirror is not None:
                return DeleteMirror(record.worker, record.uid)
        elif not _given_up(worker, config):
            return Requeue(config.workers.probe_interval_seconds)
    if (s.job is not None and s.job["metadata"]["uid"] == record.uid
            and holds_finalizer(s.job)):
        return DropFinalizer()
    return DeleteRecord(record)


def _adoptable(s: JobSnapshot, config: DispatcherConfig, *, kind: JobKind) -> str | None:
    """A reachable worker where a live mirror of this job runs unrecorded, if any."""
    for worker, mirror in zip(s.elsewhere, s.elsewhere_mirrors, strict=True):
        if (worker.usable and mirror is not None
                and not mirror["metadata"].get("deletionTimestamp")
                and kind.is_ours(mirror, manager_uid=s.uid, origin=config.mirror.origin)
                and kind.finished(mirror.get("status")) is None):
            return worker.name
    return None



def _given_up(worker: WorkerState | None, config: DispatcherConfig) -> bool:
    """No worker, or lost for longer than the timeout: the GC cleans up on its return."""
    return worker is None or (worker.lost_for is not None
                              and worker.lost_for >= config.workers.lost_timeout_seconds)


def _leave(s: JobSnapshot, config: DispatcherConfig, *, kind: JobKind) -> Action:
    """Deleted or finished on the manager: the mirror goes first, then the record, then
    the finalizer."""
    assert s.job is not None
    record = s.record
    if record is None:
        return DropFinalizer() if holds_finalizer(s.job) else Forget()
    if s.placed_on is None:
        return DeleteRecord(record)
    deleting = bool(s.job["metadata"].get("deletionTimestamp"))
    if not deleting and config.mirror.keep_finished:
        return DeleteRecord(record)
    if s.worker is not None and s.worker.usable:
        if s.mirror is not None and kind.is_ours(s.mirror, manager_uid=s.uid,
                                                 origin=config.mirror.origin):
            return DeleteMirror(s.placed_on, s.uid)
        return DeleteRecord(record)
    if _given_up(s.worker, config):
        return DeleteRecord(record)
    return Requeue(config.workers.probe_interval_seconds)


def _evict(s: JobSnapshot, config: DispatcherConfig, reason: str, message: str, *,
           counted: bool = True, exclude: bool = False, backoff: bool = True) -> Unplace:
    """Counted evictions wait `mirror.requeueBackoffSeconds` (doubled each time) before
    the job is placed again, unless the job is not at fault (`backoff=False`)."""
    assert s.job is not None and s.placed_on is not None
    if not counted:
        return Unplace(s.placed_on, reason, f"{message}; requeued", eviction=True,
                       exclude=exclude)
    evictions = (s.record.evictions if s.record is not None else 0) + 1
    delay = config.mirror.requeue_backoff_seconds * 2 ** (evictions - 1) if backoff else 0.0
    return Unplace(s.placed_on, reason, f"{message}; requeued", eviction=True,
                   evictions=evictions, fail=evictions >= config.mirror.max_evictions,
                   backoff=delay)


def _placed(s: JobSnapshot, config: DispatcherConfig, *, kind: JobKind) -> Action:
    assert s.job is not None and s.placed_on is not None
    name = s.placed_on
    if not s.booked:
        return Book(name)
    for other, stray in zip(s.elsewhere, s.elsewhere_mirrors, strict=True):
        if other.usable and stray is not None:
            if stray["metadata"].get("deletionTimestamp"):
                return Requeue(config.workers.probe_interval_seconds)
            return DeleteMirror(other.name, s.uid)
    if s.job["spec"].get("suspend"):
        return Unplace(name, c.REASON_SUSPENDED,
                       "suspended: mirror removed and quota released", eviction=False)
    worker = s.worker
    if worker is None:
        return _evict(s, config, c.REASON_WORKER_LOST, f"worker {name} is no longer registered",
                      backoff=False)
    if not worker.usable:
        timeout = config.workers.lost_timeout_seconds
        if worker.lost_for is None:
            return Requeue(config.workers.probe_interval_seconds)
        if worker.lost_for < timeout:
            return Requeue(timeout - worker.lost_for + _BLIP_MARGIN_SECONDS)
        if config.workers.when_lost is WhenWorkerLost.WAIT:
            return _hold_on_lost(s, config, worker)
        return _evict(s, config, c.REASON_WORKER_LOST,
                      f"worker {name} lost for {int(worker.lost_for)}s ({worker.message})",
                      backoff=False)
    if worker.draining:
        return _evict(s, config, c.REASON_DRAINED, f"worker {name} is being drained",
                      counted=False)
    origin = config.mirror.origin
    if s.mirror is None:
        if s.tombstone is not None and kind.is_ours(s.tombstone, manager_uid=s.uid,
                                                    origin=origin):
            finished = kind.finished(s.tombstone.get("status"))
            if finished is not None:
                return Finish(name, s.tombstone, finished)
            return _evict(s, config, c.REASON_MIRROR_GONE,
                          f"the mirror on worker {name} was deleted")
        return CreateMirror(name)
    if not kind.is_ours(s.mirror, manager_uid=s.uid, origin=origin):
        return Reject(name, c.REASON_NAME_CONFLICT,
                      f"{s.key} on {name} is not a mirror of this job")
    finished = kind.finished(s.mirror.get("status"))
    if finished is not None:
        if _retry_requested(s.job, finished, kind=kind):
            return _evict(s, config, c.REASON_RETRYING_FAILURE,
                          f"failed on worker {name} with {finished.get('reason')}, "
                          "which the job retries")
        return Finish(name, s.mirror, finished)
    admission = admission_of(s.mirror, s.workload, kind=kind)
    if admission.stage is Stage.EVICTED:
        by = f" by its Kueue ({admission.reason})" if admission.reason else ""
        uncounted = admission.reason in UNCOUNTED_EVICTIONS
        return _evict(s, config, c.REASON_MIRROR_EVICTED,
                      f"evicted on worker {name}{by}: {admission.message}",
                      counted=not uncounted, exclude=uncounted)
    if admission.stage is Stage.WAITING:
        return _waiting_for_admission(s, config, admission)
    if not kind.running(s.mirror):
        return SyncStatus(name, s.mirror,
                          message=f"on worker {name}, waiting for its pods to run there")
    return SyncStatus(name, s.mirror, message=f"running on worker {name}")


def _hold_on_lost(s: JobSnapshot, config: DispatcherConfig, worker: WorkerState) -> Action:
    """`workers.whenLost: Wait`: a copy may still run there, so the job stays, unless an
    admin drains the worker (then it moves, not counted as an eviction)."""
    assert s.placed_on is not None and worker.lost_for is not None
    name = s.placed_on
    if worker.draining:
        return _evict(s, config, c.REASON_DRAINED,
                      f"worker {name} is unreachable and being drained", counted=False)
    since = datetime.datetime.fromtimestamp(s.wall - worker.lost_for, datetime.UTC)
    return Hold(name, c.REASON_WORKER_UNREACHABLE,
                f"worker {name} unreachable since {since:%Y-%m-%dT%H:%M:%SZ} "
                f"({worker.message}); kept there (workers.whenLost: Wait) as a copy may "
                "still run on it: it moves once the worker answers without it, or is "
                "drained or removed")


def _waiting_for_admission(s: JobSnapshot, config: DispatcherConfig,
                           admission: Admission) -> Action:
    assert s.mirror is not None and s.placed_on is not None and s.worker is not None
    name, worker = s.placed_on, s.worker
    queue = (f"ClusterQueue {worker.cluster_queue}" if worker.cluster_queue
             else f"LocalQueue {worker.local_queue}" if worker.local_queue else "its queue")
    timeout = config.placement.admission_timeout_seconds
    waited = max(0.0, s.wall - _created(s.mirror, default=s.wall))
    if timeout and waited >= timeout:
        return Unplace(name, c.REASON_ADMISSION_TIMEOUT,
                       f"not admitted by the Kueue of worker {name} in {int(waited)}s "
                       f"({admission.message}); placed again elsewhere", eviction=False,
                       exclude=True)
    if waited < ADMISSION_QUIET_SECONDS:
        return Requeue(ADMISSION_QUIET_SECONDS - waited + _BLIP_MARGIN_SECONDS)
    return SyncStatus(name, s.mirror, reason=c.REASON_WAITING_FOR_ADMISSION,
                      message=f"placed on worker {name}, waiting for admission in {queue}: "
                              f"{admission.message}",
                      recheck=timeout - waited + _BLIP_MARGIN_SECONDS if timeout else None)


def _created(obj: JSON, *, default: float) -> float:
    text = (obj.get("metadata") or {}).get("creationTimestamp")
    if not text:
        return default
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default


def _retry_requested(job: JSON, finished: JSON, *, kind: JobKind) -> bool:
    """Whether a failed mirror's reason is one the job opted in to retry elsewhere."""
    if not kind.failed(finished):
        return False
    wanted = annotations_of(job).get(c.ANNOTATION_RETRY_ON_REASONS, "")
    return finished.get("reason") in {r.strip() for r in wanted.split(",") if r.strip()}


def _pending(s: JobSnapshot, memory: JobMemory) -> Action:
    assert s.job is not None
    if s.job["spec"].get("suspend"):
        return Wait(c.REASON_SUSPENDED, "suspended: not dispatched")
    if s.runtime is None:
        return Wait(c.REASON_RUNTIME_NOT_FOUND,
                    f"{s.runtime_name} does not exist on the manager; the job is placed "
                    "once it does")
    if s.demand_error is not None:
        return Wait(s.demand_error.reason, f"not dispatched: {s.demand_error}", warn=True)
    assert s.demand is not None
    selector_text = annotations_of(s.job).get(c.ANNOTATION_CLUSTER_SELECTOR, "")
    try:
        selector = parse_selector(selector_text)
    except SelectorError as error:
        return Wait(c.REASON_INVALID_CLUSTER_SELECTOR,
                    f"not dispatched: annotation {c.ANNOTATION_CLUSTER_SELECTOR}: {error}",
                    warn=True)
    if memory.not_before > s.now:
        return Requeue(memory.not_before - s.now)
    if s.reservation is not None:
        return RecordPlacement(s.reservation, s.demand_on.get(s.reservation, s.demand))
    return Enqueue(PendingJob(
        key=s.key, uid=s.uid, demand=s.demand, priority=s.priority,
        created=s.job["metadata"].get("creationTimestamp", ""), selector=selector,
        excluded=memory.excluded_now(s.now), demand_on=s.demand_on, missing_on=s.missing_on,
        priority_class=(s.job["metadata"].get("labels") or {}).get(c.LABEL_PRIORITY_CLASS, "")))
