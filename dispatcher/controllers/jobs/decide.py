"""The life of a job as one pure decision: `decide(snapshot, memory, config) -> Action`.

No I/O and no clock of its own: the snapshot carries the time it was read. Where a job
is placed is its Placement record's word (never its annotations or finalizer, which any
user who may edit the job can write), and a live mirror on a worker is a fact. The
actions are in `actions.py`; the rows, in the order they are tried
(`docs/architecture.md` draws the same arrows, `tests/unit/test_decide.py` tests them):

- a leftover record of this name (its job gone, re-created or no longer claimed) ->
  delete its mirror (while the worker can be reached; a worker lost past the timeout is
  given up on), drop the finalizer of a job no longer claimed, then delete the record
  (telling a job no longer claimed why its mirror went): its quota is released only
  then, once nothing runs;
- a job not claimed (any more) that holds our finalizer with no record (placed by an
  earlier version, which kept the placement in annotations): ours to clean up ->
  delete its mirror on the worker its annotation names (only when the mirror proves
  it is ours: origin label and manager UID, which a namespace user cannot write on the
  worker; a worker unreachable but not given up on is waited for), then drop the
  finalizer, with an event saying why;
- no job this dispatcher claims (gone, or not claimed) -> forget it;
- deleted on the manager -> delete the mirror (while the worker can be reached), then
  the record, then drop the finalizer; a worker lost past the timeout is given up on
  (the GC cleans up);
- finished on the manager -> the same, unless the mirror is retained
  (`mirror.retainFinishedSeconds`, or `keepFinished` for good): then the record goes at
  once (its quota is released at the finish) and the finalizer stays while the finished
  mirror is kept, with its pods, on the worker the job's annotation names (proved ours by
  its origin label and manager UID); it goes when the time is up or the job is deleted,
  then the finalizer;
- no record, and a live mirror of the job on a reachable worker (left by an earlier
  version, which kept the placement in annotations) -> adopt it: record it there; no
  record, and the job's annotation and finalizer name a worker whose mirrors are not
  read yet -> wait for them (or for the worker to be given up on) before anything else,
  so an earlier version's mirror is adopted, never doubled;
- the job's view (annotations `cluster`, `demand`, `evictions`, the finalizer) differs
  from the record -> rewrite it from the record, and say so in an event;
- a mirror on a worker is an orphan, for the garbage collector, exactly when these rows
  would not keep it (`orphan_reason`): its job gone or re-created, placed elsewhere,
  finished (and not retained, or retained past its time), not placed, or not claimed
  with no record;
- placed, not yet booked (after a restart) -> book it (never less than it needs now);
- placed, a live mirror of it on another reachable worker -> delete that one first
  (never two copies at once);
- placed and suspended -> take it off the worker (not an eviction); with Kueue on the
  manager, `suspend` is Kueue's, so instead: placed while the job's Workload no longer
  holds its place (Kueue evicted, preempted or deactivated it, or our check went Retry or
  Rejected: `admission/gate.py`) -> take it off the worker (not an eviction);
- placed on a worker no longer registered -> evict (WorkerLost); lost past
  `workers.lostTimeoutSeconds` -> evict (WorkerLost), or with `workers.whenLost: Wait`
  hold it there and say so (a copy may still run on it), until the worker answers or
  is drained; lost for less -> wait; inactive but not lost (a blip) -> wait; a lost
  worker's jobs are placed again at once (no backoff: they are not at fault);
- placed on a draining worker -> evict, not counted toward `mirror.maxEvictions`;
- placed, and the scheduler takes its room for a job of higher priority (`preempted_by`)
  -> take it off (Preempted: requeued at once, not an eviction), unless its mirror has
  finished meanwhile (then it finishes);
- taking a job off its worker writes the record (not placed) first, then deletes the
  mirror: while the worker can be asked; a worker unreachable but not lost is waited
  for; a lost or unregistered one is given up on (its mirror is the GC's once it is
  back);
- placed, no mirror: the worker refused the one just asked for -> reject (the reason it
  gave); a tombstone that finished -> finish; one that did not -> evict (MirrorGone);
  the worker's current copy of the runtime gives a demand other than the one booked,
  or cannot run the job -> take it off the worker (RuntimeChanged, not an eviction:
  never a booking computed from one runtime for pods made from another); else create
  the mirror;
- placed, the object there is not ours -> reject (NameConflict);
- placed, mirror finished: failed with a reason the job retries -> evict; else finish;
- placed, mirror evicted by the worker or its Kueue -> evict (MirrorEvicted; preempted
  is not counted toward `maxEvictions` and keeps the job off that worker a while);
- placed, mirror waiting for the worker's Kueue to admit it -> for its first
  `ADMISSION_QUIET_SECONDS` nothing is written (most mirrors are admitted by then, and
  each of Kueue's steps would be one more status write on the manager); after that show
  "waiting for admission" with Kueue's word, each new word once it has stood as long
  (Kueue's `lastTransitionTime`: a burst's Workloads pass several steps in seconds); past
  `placement.admissionTimeoutSeconds` -> take it off the worker (AdmissionTimeout, not
  an eviction) and keep the job off that worker a while; admitted -> copy its status
  ("running on X", with where its pods and logs are), unless the mirror has no status
  yet and the job shows nothing either (nothing to tell until it does);
- not placed: suspended (with Kueue on the manager: its Workload does not ask for a
  placement now, i.e. no quota reserved or our check not Pending), runtime missing,
  demand or selector invalid -> wait with that reason (a wait for the manager's Kueue
  shown only once the job is `WAITING_QUIET_SECONDS` old, as Kueue's first steps with a
  new job are that quick); in eviction backoff (the
  record's `requeue.notBefore`) -> wait until then; reserved by the scheduler -> record
  the placement; else queue it (off the workers the record's `requeue.excludedWorkers`
  names for now), showing the scheduler's last word on it (a wait for quota once it has
  lasted `WAITING_QUIET_SECONDS`, new numbers under it once they have stood as long).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.conditions import condition
from dispatcher.api.placement import NO_EXCLUSIONS, PlacementRecord
from dispatcher.claim import Claim
from dispatcher.config import DispatcherConfig, MirrorConfig, WhenWorkerLost
from dispatcher.controllers.jobs.actions import (
    Action,
    Adopt,
    Book,
    CreateMirror,
    DeleteMirror,
    DeleteRecord,
    DropFinalizer,
    Enqueue,
    Finish,
    Forget,
    Hold,
    Idle,
    RecordPlacement,
    Reject,
    Requeue,
    RewriteView,
    SyncStatus,
    Unplace,
    Wait,
)
from dispatcher.controllers.jobs.admission import (
    UNCOUNTED_EVICTIONS,
    Admission,
    Stage,
    admission_of,
)
from dispatcher.controllers.jobs.memory import JobMemory
from dispatcher.controllers.jobs.snapshot import (
    Absent,
    Claimed,
    Copy,
    Leftover,
    Snapshot,
    WorkerState,
    annotations_of,
    holds_finalizer,
    uid_of,
)
from dispatcher.controllers.jobs.view import differences
from dispatcher.controllers.status import MAX_MESSAGE
from dispatcher.kinds import JobKind
from dispatcher.placement import resources
from dispatcher.placement.scheduler import SAME_EVERYWHERE, PendingJob
from dispatcher.placement.selector import SelectorError, parse_selector

JSON = dict[str, Any]
_BLIP_MARGIN_SECONDS = 0.05
WAITING_QUIET_SECONDS = 2.0
"""A job's wait for quota is shown once it has lasted this long, and a change of its
numbers once the new ones have stood this long (`_quiet_left`); a new job's wait for the
manager's Kueue once the job is this old (`_kueue_quiet_left`)."""
ADMISSION_QUIET_SECONDS = 2.0
"""A new mirror's admission steps are not shown on the manager this long: Kueue usually
admits within it, and showing each step (no Workload yet, pending, quota reserved,
admitted) cost four status writes per job."""


def decide(snapshot: Snapshot, memory: JobMemory, config: DispatcherConfig, *,
           kind: JobKind) -> Action:
    if snapshot.leftover is not None:
        return _clean_up(snapshot, snapshot.leftover, config)
    if isinstance(snapshot, Absent):
        return _unclaimed(snapshot, config, kind=kind)
    return _claimed(snapshot, memory, config, kind=kind)


def explanation(snapshot: Snapshot, action: Action) -> tuple[str, str] | None:
    """(reason, message): why a claimed job waits, or where it runs, by the decision just
    made on the snapshot (the words its Dispatched condition gets); for a job waiting out
    its backoff, why it was taken off (its record's). None while there is nothing to say:
    the job is not claimed, or the scheduler has not looked at it yet."""
    if not isinstance(snapshot, Claimed):
        return None
    match action:
        case (Wait(reason=reason, message=message) | Hold(reason=reason, message=message)
              | SyncStatus(reason=reason, message=message)
              | Unplace(reason=reason, message=message)
              | Reject(reason=reason, message=message)
              | Enqueue(reason=reason, message=message)) if reason:
            return reason, message
    record = snapshot.record
    if record is not None and not record.placed and record.taken_off[0]:
        return record.taken_off
    return None


def _unclaimed(s: Absent, config: DispatcherConfig, *, kind: JobKind) -> Action:
    """No job this dispatcher claims: forget it, unless the job there holds our
    finalizer (with no record: an earlier version placed it): then its mirror on the
    worker its annotation names goes first, then the finalizer."""
    own = s.unclaimed
    if own is None or not holds_finalizer(own):
        return Forget()
    named = annotations_of(own).get(c.ANNOTATION_CLUSTER, "")
    hint = s.hinted_worker
    if hint is not None and hint.usable:
        mirror = s.hinted_mirror
        if (mirror is not None and not mirror["metadata"].get("deletionTimestamp")
                and kind.is_ours(mirror, manager_uid=uid_of(own),
                                 origin=config.mirror.origin)):
            return DeleteMirror(hint.name, mirror)
    elif hint is not None and not _given_up(hint, config):
        return Requeue(config.workers.probe_interval_seconds)
    if hint is not None and hint.usable:
        mirror = s.hinted_mirror
        if mirror is None:
            where = f"; no mirror of it is left on worker {named}"
        elif mirror["metadata"].get("deletionTimestamp"):
            where = f"; its mirror on worker {named} is being deleted"
        else:
            where = f"; the object of its name on worker {named} is not its mirror"
    elif hint is not None:
        where = (f"; worker {named} is lost (its garbage collector deletes a mirror left "
                 "there once it answers)")
    else:
        where = f"; worker {named} is not registered" if named else ""
    return DropFinalizer(own, reason=c.REASON_NOT_CLAIMED,
                         message=f"no longer claimed by this dispatcher: finalizer "
                                 f"{c.FINALIZER} dropped{where}")


def _claimed(s: Claimed, memory: JobMemory, config: DispatcherConfig, *,
             kind: JobKind) -> Action:
    job = s.job
    if job["metadata"].get("deletionTimestamp") or kind.finished(job.get("status")):
        return _leave(s, config, kind=kind)
    if s.record is None:
        adoptable = _adoptable(s, config, kind=kind)
        if adoptable is not None:
            return Adopt(adoptable.worker.name,
                         resources.maximum([adoptable.holds, s.demand or {}]))
        hint = s.hinted_worker
        if hint is not None and not hint.usable and not _given_up(hint, config):
            return Requeue(config.workers.probe_interval_seconds)
    changed = differences(job, s.record)
    if changed:
        return RewriteView(tuple(changed))
    if s.record is not None and s.record.placed:
        return _placed(s, s.record, memory, config, kind=kind)
    return _pending(s)


def _clean_up(s: Snapshot, leftover: Leftover, config: DispatcherConfig) -> Action:
    """A record whose job is gone, re-created or no longer claimed: its mirror first."""
    record = leftover.record
    if record.placed:
        worker = leftover.worker
        if worker is not None and worker.usable:
            if leftover.mirror is not None:
                return DeleteMirror(record.worker, leftover.mirror)
        elif not _given_up(worker, config):
            return Requeue(config.workers.probe_interval_seconds)
    own = s.unclaimed if isinstance(s, Absent) else None
    if own is not None and uid_of(own) != record.uid:
        own = None
    if own is not None and holds_finalizer(own):
        return DropFinalizer(own)
    return DeleteRecord(record, unclaimed=own if record.placed else None)


def _adoptable(s: Claimed, config: DispatcherConfig, *, kind: JobKind) -> Copy | None:
    """A live mirror of this job that runs unrecorded on a reachable worker, if any."""
    for copy in s.elsewhere:
        mirror = copy.mirror
        if (copy.worker.usable and mirror is not None
                and not mirror["metadata"].get("deletionTimestamp")
                and kind.is_ours(mirror, manager_uid=s.uid, origin=config.mirror.origin)
                and kind.finished(mirror.get("status")) is None):
            return copy
    return None


def orphan_reason(mirror: JSON, job: JSON | None, record: PlacementRecord | None, *,
                  worker: str, claim: Claim, kind: JobKind, config: MirrorConfig,
                  wall: float) -> str | None:
    """Why `mirror` on `worker` is wanted by no job, or None when its job wants it: the
    garbage collector's question, answered by the rows above (`wall`: the time now). A
    live mirror of a claimed, unfinished job with no record is wanted: `decide` adopts it
    (`_adoptable`)."""
    if job is None:
        return "its manager TrainJob is gone"
    if not kind.is_ours(mirror, manager_uid=uid_of(job), origin=config.origin):
        return "its manager TrainJob was re-created"
    if record is not None and record.placed:
        return None if record.worker == worker else (
            f"its job is placed on worker {record.worker}")
    if record is None and not claim.claims(job):
        return "its manager TrainJob is not claimed by this dispatcher (nothing adopts it)"
    if kind.finished(job.get("status")):
        if retention_left(mirror, config, wall=wall, kind=kind) > 0:
            return None
        return ("its manager TrainJob has finished" if not config.retain_finished_seconds
                else "its manager TrainJob has finished and mirror.retainFinishedSeconds "
                     "is up")
    if record is not None:
        return "its manager TrainJob is not placed"
    return None


def retention_left(mirror: JSON, config: MirrorConfig, *, wall: float,
                   kind: JobKind) -> float:
    """Seconds a finished mirror is still kept on its worker (infinite with
    `keepFinished`; none for a mirror that has not finished: only a finished one is
    kept), counted from its own finish there."""
    finished = kind.finished(mirror.get("status"))
    if finished is None:
        return 0.0
    if config.keep_finished:
        return float("inf")
    since = _timestamp(finished.get("lastTransitionTime"), default=wall)
    return config.retain_finished_seconds - max(0.0, wall - since)


def _given_up(worker: WorkerState | None, config: DispatcherConfig) -> bool:
    """No worker, or lost for longer than the timeout: the GC cleans up on its return."""
    return worker is None or (worker.lost_for is not None
                              and worker.lost_for >= config.workers.lost_timeout_seconds)


def _leave(s: Claimed, config: DispatcherConfig, *, kind: JobKind) -> Action:
    """Deleted or finished on the manager: the mirror goes first, then the record, then
    the finalizer."""
    record = s.record
    deleting = bool(s.job["metadata"].get("deletionTimestamp"))
    if record is None:
        return (_retained(s, config, deleting=deleting, kind=kind) if holds_finalizer(s.job)
                else Forget())
    if not record.placed:
        return DeleteRecord(record)
    if (not deleting and s.mirror is not None
            and retention_left(s.mirror, config.mirror, wall=s.wall, kind=kind) > 0):
        return DeleteRecord(record)
    if s.worker is not None and s.worker.usable:
        if s.mirror is not None and kind.is_ours(s.mirror, manager_uid=s.uid,
                                                 origin=config.mirror.origin):
            return DeleteMirror(record.worker, s.mirror)
        return DeleteRecord(record)
    if _given_up(s.worker, config):
        return DeleteRecord(record)
    return Requeue(config.workers.probe_interval_seconds)


def _retained(s: Claimed, config: DispatcherConfig, *, deleting: bool,
              kind: JobKind) -> Action:
    """Finished or deleted, no record, our finalizer held: the finished mirror kept on
    the worker the job's annotation names goes when its time is up or the job is
    deleted; then the finalizer. A worker unreachable but not given up on is waited for."""
    hint, mirror = s.hinted_worker, s.hinted_mirror
    if hint is not None and hint.usable:
        if (mirror is not None and not mirror["metadata"].get("deletionTimestamp")
                and kind.is_ours(mirror, manager_uid=s.uid, origin=config.mirror.origin)):
            left = retention_left(mirror, config.mirror, wall=s.wall, kind=kind)
            if deleting or left <= 0:
                return DeleteMirror(hint.name, mirror)
            return Idle() if left == float("inf") else Requeue(left + _BLIP_MARGIN_SECONDS)
    elif hint is not None and not _given_up(hint, config):
        return Requeue(config.workers.probe_interval_seconds)
    return DropFinalizer(s.job)


def _take_off(s: Claimed, unplace: Unplace, config: DispatcherConfig, *,
              kind: JobKind) -> Action:
    """`unplace`, with the mirror to delete first: while the worker can be asked; a
    worker unreachable without a network loss is waited for; a lost or unregistered one
    is given up on."""
    worker = s.worker
    if worker is not None and worker.usable:
        ours = s.mirror is not None and kind.is_ours(s.mirror, manager_uid=s.uid,
                                                     origin=config.mirror.origin)
        return dataclasses.replace(unplace, mirror=s.mirror if ours else None)
    if worker is not None and worker.lost_for is None:
        return Requeue(config.workers.probe_interval_seconds)
    return unplace


def _evict(s: Claimed, record: PlacementRecord, config: DispatcherConfig, reason: str,
           message: str, *, kind: JobKind, counted: bool = True, exclude: bool = False,
           backoff: bool = True) -> Action:
    """Counted evictions wait `mirror.requeueBackoffSeconds` (doubled each time) before
    the job is placed again, unless the job is not at fault (`backoff=False`)."""
    if not counted:
        unplace = Unplace(record.worker, reason, f"{message}; requeued", eviction=True,
                          event_reason=c.REASON_EVICTED, count_requeue=True, exclude=exclude)
    else:
        evictions = record.evictions + 1
        delay = (config.mirror.requeue_backoff_seconds * 2 ** (evictions - 1)
                 if backoff else 0.0)
        unplace = Unplace(record.worker, reason, f"{message}; requeued", eviction=True,
                          event_reason=c.REASON_EVICTED, count_requeue=True,
                          evictions=evictions, fail=evictions >= config.mirror.max_evictions,
                          backoff=delay)
    return _take_off(s, unplace, config, kind=kind)


def _placed(s: Claimed, record: PlacementRecord, memory: JobMemory,
            config: DispatcherConfig, *, kind: JobKind) -> Action:
    name = record.worker
    if not s.booked:
        return Book(name, resources.maximum([record.demand, s.demand or {}]))
    for copy in s.elsewhere:
        if copy.worker.usable and copy.mirror is not None:
            if copy.mirror["metadata"].get("deletionTimestamp"):
                return Requeue(config.workers.probe_interval_seconds)
            return DeleteMirror(copy.worker.name, copy.mirror)
    if s.gate is not None and not s.gate.holds:
        return _take_off(s, Unplace(name, s.gate.reason,
                                    f"{s.gate.message}: mirror removed and quota released",
                                    eviction=False), config, kind=kind)
    if s.gate is None and s.job["spec"].get("suspend"):
        return _take_off(s, Unplace(name, c.REASON_SUSPENDED,
                                    "suspended: mirror removed and quota released",
                                    eviction=False), config, kind=kind)
    worker = s.worker
    if worker is None:
        return _evict(s, record, config, c.REASON_WORKER_LOST,
                      f"worker {name} is no longer registered", kind=kind, backoff=False)
    if not worker.usable:
        return _unreachable(s, record, worker, config, kind=kind)
    if worker.draining:
        return _evict(s, record, config, c.REASON_DRAINED, f"worker {name} is being drained",
                      kind=kind, counted=False)
    preemptor = s.preempted_by
    if preemptor is not None and not (s.mirror is not None
                                      and kind.finished(s.mirror.get("status"))):
        return _take_off(s, Unplace(
            name, c.REASON_PREEMPTED,
            f"preempted on worker {name} by {preemptor.key} (priority {preemptor.priority}, "
            f"above this job's {record.priority}); requeued", eviction=False,
            event_reason=c.REASON_PREEMPTED, count_requeue=True, preemptor=preemptor.key),
            config, kind=kind)
    if s.mirror is None:
        return _no_mirror(s, record, memory, config, kind=kind)
    if not kind.is_ours(s.mirror, manager_uid=s.uid, origin=config.mirror.origin):
        return Reject(name, c.REASON_NAME_CONFLICT,
                      f"{s.key} on {name} is not a mirror of this job")
    return _mirrored(s, record, worker, s.mirror, config, kind=kind)


def _unreachable(s: Claimed, record: PlacementRecord, worker: WorkerState,
                 config: DispatcherConfig, *, kind: JobKind) -> Action:
    """Placed on a registered worker that cannot be asked now."""
    timeout, lost_for = config.workers.lost_timeout_seconds, worker.lost_for
    if lost_for is None:
        return Requeue(config.workers.probe_interval_seconds)
    if lost_for < timeout:
        return Requeue(timeout - lost_for + _BLIP_MARGIN_SECONDS)
    if config.workers.when_lost is WhenWorkerLost.WAIT:
        return _hold_on_lost(s, record, worker, lost_for, config, kind=kind)
    return _evict(s, record, config, c.REASON_WORKER_LOST,
                  f"worker {record.worker} lost for {int(lost_for)}s ({worker.message})",
                  kind=kind, backoff=False)


def _no_mirror(s: Claimed, record: PlacementRecord, memory: JobMemory,
               config: DispatcherConfig, *, kind: JobKind) -> Action:
    name = record.worker
    refused = memory.refused
    if refused is not None and refused.worker == name:
        return Reject(name, refused.reason, refused.message)
    if s.tombstone is not None and kind.is_ours(s.tombstone, manager_uid=s.uid,
                                                origin=config.mirror.origin):
        finished = kind.finished(s.tombstone.get("status"))
        if finished is not None:
            return Finish(name, s.tombstone, finished)
        return _evict(s, record, config, c.REASON_MIRROR_GONE,
                      f"the mirror on worker {name} was deleted", kind=kind)
    if s.cannot_run_there:
        return Unplace(name, c.REASON_RUNTIME_CHANGED,
                       f"worker {name} {s.cannot_run_there} (its runtime changed after the "
                       "job was booked there); placed again", eviction=False,
                       event_reason=c.REASON_RUNTIME_CHANGED, count_requeue=True)
    if s.demand_there is not None and s.demand_there != record.demand:
        return Unplace(name, c.REASON_RUNTIME_CHANGED,
                       f"the {s.runtime_name} of worker {name} changed after the job was "
                       f"booked there: it needs {resources.format_vector(s.demand_there)} "
                       f"there, not the {resources.format_vector(record.demand)} booked; "
                       "placed again", eviction=False, event_reason=c.REASON_RUNTIME_CHANGED,
                       count_requeue=True)
    return CreateMirror(name, dict(record.demand))


def _mirrored(s: Claimed, record: PlacementRecord, worker: WorkerState, mirror: JSON,
              config: DispatcherConfig, *, kind: JobKind) -> Action:
    """Placed, and our mirror is on the worker: finished, evicted, waiting or running."""
    name = record.worker
    finished = kind.finished(mirror.get("status"))
    if finished is not None:
        if _retry_requested(s.job, finished, kind=kind):
            return _evict(s, record, config, c.REASON_RETRYING_FAILURE,
                          f"failed on worker {name} with {finished.get('reason')}, "
                          "which the job retries", kind=kind)
        return Finish(name, mirror, finished)
    admission = admission_of(mirror, s.workload, kind=kind)
    if admission.stage is Stage.EVICTED:
        by = f" by its Kueue ({admission.reason})" if admission.reason else ""
        uncounted = admission.reason in UNCOUNTED_EVICTIONS
        return _evict(s, record, config, c.REASON_MIRROR_EVICTED,
                      f"evicted on worker {name}{by}: {admission.message}", kind=kind,
                      counted=not uncounted, exclude=uncounted)
    if admission.stage is Stage.WAITING:
        return _waiting_for_admission(s, name, worker, mirror, config, admission)
    if (condition(s.job.get("status"), c.CONDITION_DISPATCHED) is None
            and not kind.remote_status(mirror)):
        return Idle()
    where = logs_hint(s.key, mirror, kind=kind)
    if not kind.running(mirror):
        return SyncStatus(name, mirror,
                          message=f"on worker {name}, waiting for its pods to run there "
                                  f"({where})")
    return SyncStatus(name, mirror, message=f"running on worker {name} ({where})")


def logs_hint(key: str, mirror: JSON, *, kind: JobKind) -> str:
    """Where a started job's pods and logs are, for its status message."""
    return f"pods {kind.pods_selector(mirror)}; logs: dispatcher logs {key}"


def _hold_on_lost(s: Claimed, record: PlacementRecord, worker: WorkerState, lost_for: float,
                  config: DispatcherConfig, *, kind: JobKind) -> Action:
    """`workers.whenLost: Wait`: a copy may still run there, so the job stays, unless an
    admin drains the worker (then it moves, not counted as an eviction)."""
    name = record.worker
    if worker.draining:
        return _evict(s, record, config, c.REASON_DRAINED,
                      f"worker {name} is unreachable and being drained", kind=kind,
                      counted=False)
    since = datetime.datetime.fromtimestamp(s.wall - lost_for, datetime.UTC)
    return Hold(name, c.REASON_WORKER_UNREACHABLE,
                f"worker {name} unreachable since {since:%Y-%m-%dT%H:%M:%SZ} "
                f"({worker.message}); kept there (workers.whenLost: Wait) as a copy may "
                "still run on it: it moves once the worker answers without it, or is "
                "drained or removed")


def _waiting_for_admission(s: Claimed, name: str, worker: WorkerState, mirror: JSON,
                           config: DispatcherConfig, admission: Admission) -> Action:
    queue = (f"ClusterQueue {worker.cluster_queue}" if worker.cluster_queue
             else f"LocalQueue {worker.local_queue}" if worker.local_queue else "its queue")
    timeout = config.placement.admission_timeout_seconds
    waited = max(0.0, s.wall - _created(mirror, default=s.wall))
    if timeout and waited >= timeout:
        return Unplace(name, c.REASON_ADMISSION_TIMEOUT,
                       f"not admitted by the Kueue of worker {name} in {int(waited)}s "
                       f"({admission.message}); placed again elsewhere", eviction=False,
                       event_reason=c.REASON_ADMISSION_TIMEOUT, count_requeue=True,
                       exclude=True, mirror=mirror)
    held = _held_back(ADMISSION_QUIET_SECONDS - waited)  # a new mirror
    if held is None:  # a new word of Kueue's; a skewed clock never holds it longer
        stood = s.wall - _timestamp(admission.since, default=s.wall - ADMISSION_QUIET_SECONDS)
        held = _held_back(ADMISSION_QUIET_SECONDS - max(0.0, stood))
    if held is not None:
        return Requeue(held)
    return SyncStatus(name, mirror, reason=c.REASON_WAITING_FOR_ADMISSION,
                      message=f"placed on worker {name}, waiting for admission in {queue}: "
                              f"{admission.message}",
                      recheck=timeout - waited + _BLIP_MARGIN_SECONDS if timeout else None)


def _created(obj: JSON, *, default: float) -> float:
    return _timestamp((obj.get("metadata") or {}).get("creationTimestamp"), default=default)


def _timestamp(text: object, *, default: float) -> float:
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


def _warning(s: Claimed, reason: str, message: str) -> Wait:
    """Wait with a reason the job is at fault for: a Warning event too, unless its
    status says so already (the event was given then)."""
    shown = condition(s.job.get("status"), c.CONDITION_DISPATCHED) or {}
    news = (shown.get("reason"), shown.get("message")) != (reason, message[:MAX_MESSAGE])
    return Wait(reason, message, warn=news)


def _pending(s: Claimed) -> Action:
    if s.gate is not None and not s.gate.admits:
        return Wait(s.gate.reason, s.gate.message,
                    show_after=_kueue_quiet_left(s, s.gate.reason))
    if s.gate is None and s.job["spec"].get("suspend"):
        return Wait(c.REASON_SUSPENDED, "suspended: not dispatched")
    if s.runtime is None:
        return Wait(c.REASON_RUNTIME_NOT_FOUND,
                    f"{s.runtime_name} does not exist on the manager; the job is placed "
                    "once it does")
    if s.demand_error is not None:
        return _warning(s, s.demand_error.reason, f"not dispatched: {s.demand_error}")
    assert s.demand is not None, "a runtime and no demand error: the demand was computed"
    selector_text = annotations_of(s.job).get(c.ANNOTATION_CLUSTER_SELECTOR, "")
    try:
        selector = parse_selector(selector_text)
    except SelectorError as error:
        return _warning(s, c.REASON_INVALID_CLUSTER_SELECTOR,
                        f"not dispatched: annotation {c.ANNOTATION_CLUSTER_SELECTOR}: {error}")
    record = s.record
    if record is not None and record.not_before > s.wall:
        return Requeue(record.not_before - s.wall)
    if s.reservation is not None:
        return RecordPlacement(s.reservation, s.demand_on.get(s.reservation, s.demand))
    entry = PendingJob(
        key=s.key, uid=s.uid, demand=s.demand, priority=s.priority.value,
        created=s.job["metadata"].get("creationTimestamp", ""), selector=selector,
        excluded=record.excluded_at(s.wall) if record is not None else NO_EXCLUSIONS,
        demand_on=s.demand_on or SAME_EVERYWHERE, missing_on=s.missing_on or SAME_EVERYWHERE,
        priority_class=(s.job["metadata"].get("labels") or {}).get(c.LABEL_PRIORITY_CLASS, ""))
    verdict = s.verdict
    if verdict is None:
        return Enqueue(entry)
    where = f" (position {verdict.position} in the queue)" if verdict.position else ""
    why = f"; priority {s.priority.value}: {s.priority.why}" if s.priority.why else ""
    message = verdict.message + where + why
    return Enqueue(entry, reason=verdict.reason, message=message,
                   show_after=_quiet_left(s, verdict.reason, message))


def _kueue_quiet_left(s: Claimed, reason: str) -> float | None:
    """How long a wait for the manager's Kueue is not written yet (None: write it now).

    Kueue's first steps with a new job (its Workload made, queued, quota reserved, our
    check pending) take a second or so, and each would cost a status write: a job shows
    none of them in its first `WAITING_QUIET_SECONDS`, unless it shows something already
    (which must not stay wrong)."""
    if reason != c.REASON_WAITING_FOR_KUEUE or condition(
            s.job.get("status"), c.CONDITION_DISPATCHED) is not None:
        return None
    age = s.wall - _created(s.job, default=s.wall)
    return _held_back(WAITING_QUIET_SECONDS - max(0.0, age))  # skew never holds it longer


def _quiet_left(s: Claimed, reason: str, message: str) -> float | None:
    """How long a `WaitingForQuota` verdict is not written yet (None: write it now).

    A job is not shown waiting for quota in its first `WAITING_QUIET_SECONDS` (most jobs
    of a burst are placed by then, and each would cost a status write), and a new
    message under the reason already shown ("best: worker-a with 2") is written once it
    has stood that long: while quota churns the reason stays right, the numbers follow.
    """
    times = s.verdict_times
    if reason != c.REASON_WAITING_FOR_QUOTA or times is None:
        return None
    shown = condition(s.job.get("status"), c.CONDITION_DISPATCHED) or {}
    if (shown.get("reason"), shown.get("message")) == (reason, message[:MAX_MESSAGE]):
        return None
    since = times.since if shown.get("reason") == reason else times.waiting_since
    return _held_back(since + WAITING_QUIET_SECONDS - s.wall)


def _held_back(left: float) -> float | None:
    """Seconds until a held-back wait is decided again, None when it is due now."""
    return left + _BLIP_MARGIN_SECONDS if left > 0 else None
