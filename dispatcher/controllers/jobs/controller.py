"""The jobs controller: watch events become keys; each key is snapshot -> decide -> act.

Events from the manager's and the workers' watches only enqueue keys (news about a
running job in the urgent lane, a placement the scheduler made in the prompt one).
`reconcile(key)` reads a snapshot from the caches, asks the pure `decide` what to do,
and `execute`s the action with the manager writer or the worker writer: it carries the
action out and records what the writes found, and decides nothing. An action that
changed the state (placement recorded, mirror created, ...) is followed at once by the
next decision on the new state, so a new job goes from queued to mirrored in one
reconcile; a finished job's clean-up waits its turn in the ordinary lane. A 409 goes
back to the work queue's per-key backoff.

Taking a job off a worker writes its Placement record first, with the requeue state in
the same write (the eviction backoff, the workers it is kept off), and deletes the
mirror after: a failed write after it (the mirror's delete, the job's view, its status),
a crash or a new leader loses none of it and brings no mirror back. Events and metrics
follow the record, then the view and the status.

The controller is the one writer of each job's `JobMemory` (the only per-job state,
forgotten on every exit, none of which decides where or when a job runs after a
restart): what the watches report (first seen, mirror news, tombstones), the demand a
snapshot computed, and what its own writes found (a refusal not yet acted on, mirrors it
deleted). The mirror watches also feed the ledger's count of live mirrors
(`Bookkeeper`).
"""

from __future__ import annotations

import logging
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.placement import PlacementRecord
from dispatcher.claim import Claim
from dispatcher.clock import Clock
from dispatcher.config import DispatcherConfig
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
from dispatcher.controllers.jobs.bookkeeping import Bookkeeper
from dispatcher.controllers.jobs.decide import decide, explanation, logs_hint, retention_left
from dispatcher.controllers.jobs.manager_side import Conflict, ManagerWriter
from dispatcher.controllers.jobs.memory import JobMemories, JobMemory, Refusal
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.jobs.snapshot import (
    Claimed,
    Snapshot,
    SnapshotReader,
    holds_finalizer,
    uid_of,
)
from dispatcher.controllers.jobs.worker_side import Refused, WorkerWriter
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.controllers.workers import WorkerConnection, WorkerRegistry
from dispatcher.kinds import JobKind
from dispatcher.kube.informer import DELETED, Informer, job_key, object_key
from dispatcher.kube.workqueue import Lane, Result, WorkQueue
from dispatcher.observability.events import EventRecorder
from dispatcher.observability.metrics import Metrics
from dispatcher.placement.ledger import Booking, Ledger

log = logging.getLogger(__name__)
JSON = dict[str, Any]
_MAX_STEPS = 8


class JobsController:
    def __init__(
        self,
        *,
        config: DispatcherConfig,
        claim: Claim,
        kind: JobKind,
        registry: WorkerRegistry,
        ledger: Ledger,
        scheduling: SchedulingLoop,
        trainjobs: Informer,
        records: PlacementRecords,
        reader: SnapshotReader,
        manager: ManagerWriter,
        workers: WorkerWriter,
        bookkeeper: Bookkeeper,
        queue: WorkQueue,
        events: EventRecorder,
        metrics: Metrics,
        clock: Clock,
    ) -> None:
        self.config = config
        self.claim = claim
        self.kind = kind
        self.registry = registry
        self.ledger = ledger
        self.scheduling = scheduling
        self.trainjobs = trainjobs
        self.records = records
        self.reader = reader
        self.manager = manager
        self.workers = workers
        self.bookkeeper = bookkeeper
        self.queue = queue
        self.events = events
        self.metrics = metrics
        self.clock = clock
        self.memories = JobMemories()

    # ----- event handlers: map to keys and enqueue (and record what they tell) -----

    def on_job_event(self, event_type: str, obj: JSON) -> None:
        key, uid = object_key(obj), uid_of(obj)
        if (not self.claim.claims(obj) and not self.records.of_job(key)
                and self.memories.get(uid) is None and not holds_finalizer(obj)):
            return  # neither claimed nor ours to clean up
        if event_type == DELETED:
            # Gone: the next snapshot cannot name its UID. With no record placing it, it
            # holds no quota a mirror may use: released now (queue entry, reservation).
            # A placed record is cleaned up by the reconcile: the mirror goes first, and
            # the quota is released only then.
            record = self.records.of_uid(uid)
            if record is None or not record.placed:
                self._release(uid)
            self.memories.forget(uid)
        elif self.claim.claims(obj):
            memory = self.memories.of(uid)
            if memory.first_seen is None:
                memory.first_seen = self.clock.monotonic()
        self.queue.add(key)

    def on_record_event(self, event_type: str, obj: JSON) -> None:
        """A placement record changed (ours, or an admin's hand): look at its job again."""
        job = (obj.get("spec") or {}).get("job") or {}
        if job.get("namespace") and job.get("name"):
            self.queue.add(job_key(job["namespace"], job["name"]))

    def _memory_of_mirror(self, mirror: JSON) -> JobMemory | None:
        """The memory of the live manager job `mirror` belongs to, if there is one."""
        job = self.trainjobs.get(object_key(mirror))
        manager_uid = (mirror["metadata"].get("annotations") or {}).get(
            c.ANNOTATION_MANAGER_UID)
        if job is None or uid_of(job) != manager_uid or not self.claim.claims(job):
            return None
        return self.memories.of(manager_uid)

    def on_mirror_event(self, worker: str, event_type: str, obj: JSON) -> None:
        self.bookkeeper.mirror_event(worker, event_type, obj)
        memory = self._memory_of_mirror(obj)
        if memory is not None:
            if event_type == DELETED:
                uid = obj["metadata"].get("uid", "")
                if uid in memory.deleted_mirrors:
                    memory.deleted_mirrors -= {uid}
                else:
                    memory.tombstone = (worker, obj)
            else:
                if memory.tombstone is not None and memory.tombstone[0] == worker:
                    memory.tombstone = None
                if memory.status_news is None:
                    memory.status_news = self.clock.monotonic()
        self.queue.add(object_key(obj), lane=Lane.URGENT)  # news about a running job

    def on_workload_news(self, worker: str, key: str) -> None:
        """A Kueue Workload on `worker` changed: news about the job `key` if its mirror is
        there; in any case the worker's room may have changed."""
        job = self.trainjobs.get(key)
        booking = self.ledger.get(uid_of(job)) if job is not None else None
        if booking is not None and booking.worker == worker:
            self.queue.add(key, lane=Lane.URGENT)
        self.scheduling.trigger()

    def on_runtime_event(self, event_type: str, obj: JSON, *, worker: str | None = None
                         ) -> None:
        """A runtime came, changed or went (on the manager, or on `worker`): look again
        at the jobs that use it and are not placed, or are booked (on that worker) with
        no mirror yet: their mirror is made from the worker's runtime as it is then."""
        ref = (obj.get("kind"), object_key(obj))
        for job in list(self.trainjobs.store.values()):
            if not self.claim.claims(job) or self.kind.runtime_ref(job) != ref:
                continue
            booking = self.ledger.get(uid_of(job))
            if booking is None or (worker in (None, booking.worker)
                                   and not self._mirrored(booking.worker, object_key(job))):
                self.queue.add(object_key(job))

    def _mirrored(self, worker: str, key: str) -> bool:
        """Whether `worker`'s cache holds an object named `key` (or cannot be read)."""
        connection = self.registry.get(worker)
        if connection is None or connection.mirrors is None:
            return True
        return connection.mirrors.get(key) is not None

    def on_worker_change(self, worker: WorkerConnection) -> None:
        """A worker came, went or changed: re-examine its jobs and schedule again."""
        for booking in self.ledger.jobs_on(worker.name):
            self.queue.add(booking.key)
        self.scheduling.trigger()

    def on_decision(self, key: str, *, placed: bool) -> None:
        """The scheduler placed the job (its quota is booked and idle until the mirror
        exists: ahead of new jobs) or says why it waits."""
        self.queue.add(key, lane=Lane.PROMPT if placed else Lane.ORDINARY)

    # ----- reconcile: snapshot -> decide -> execute -----

    async def reconcile(self, key: str) -> Result:
        for _ in range(_MAX_STEPS):
            snapshot = await self.reader.read(key, self.memories)
            memory = self._memory(snapshot)
            action = decide(snapshot, memory, self.config, kind=self.kind)
            try:
                result = await self.execute(snapshot, memory, action)
            except Conflict as conflict:
                log.debug("%s; deciding again after the key's backoff", conflict)
                return Result.retry()
            if result is not None:
                return result
        return Result.retry()

    async def explain(self, key: str) -> tuple[str, str] | None:
        """Why job `key` waits or where it runs, as the decision on its snapshot says now
        (`decide.explanation`): what others ask instead of reading the job's status back."""
        snapshot = await self.reader.read(key, self.memories)
        memory = self.memories.get(snapshot.uid) if isinstance(snapshot, Claimed) else None
        action = decide(snapshot, memory or JobMemory(), self.config, kind=self.kind)
        return explanation(snapshot, action)

    def _memory(self, s: Snapshot) -> JobMemory:
        """The claimed job's memory, with the demand the snapshot computed recorded. For
        a job we do not claim, the memory of the one being cleaned up (the leftover's,
        else the unclaimed job's) while we remember it; an empty one otherwise (none is
        made for it)."""
        if not isinstance(s, Claimed):
            uid = (s.leftover.record.uid if s.leftover is not None
                   else uid_of(s.unclaimed) if s.unclaimed is not None else None)
            remembered = self.memories.get(uid) if uid is not None else None
            return remembered if remembered is not None else JobMemory()
        memory = self.memories.of(s.uid)
        if s.demand is not None and s.demand_version is not None:
            memory.demand = (s.demand_version, s.demand)
        return memory

    async def execute(self, s: Snapshot, memory: JobMemory, action: Action) -> Result | None:
        """Carry out `action`; None means the state changed: decide again at once."""
        match action:
            case Forget():
                uid = (s.uid if isinstance(s, Claimed)
                       else uid_of(s.unclaimed) if s.unclaimed is not None else None)
                if uid is not None:
                    self._release(uid)
                    self.memories.forget(uid)
                return Result.done()
            case Requeue(seconds=seconds):
                return Result.after(seconds)
            case DeleteMirror(worker=worker, mirror=mirror):
                await self._delete_mirror(worker, mirror, memory)
                return None
            case DeleteRecord(record=record, unclaimed=unclaimed):
                await self._delete_record(record, unclaimed)
                return None
            case DropFinalizer(job=job, reason=reason, message=message):
                dropped = await self.manager.drop_finalizer(job)
                if dropped is None:
                    return Result.done()
                if reason:
                    self.events.record(dropped, reason=reason, message=message, warning=True)
                return None
        if not isinstance(s, Claimed):
            raise AssertionError(f"{action!r} is an action on a claimed job")
        return await self._execute_claimed(s, memory, action)

    async def _execute_claimed(self, s: Claimed, memory: JobMemory, action: Action
                               ) -> Result | None:
        match action:
            case Idle():
                memory.status_news = None
                return Result.done()
            case Wait(reason=reason, message=message, warn=warn, show_after=later):
                self._release(s.uid)
                if later is not None:
                    return Result.after(later)
                await self.manager.set_waiting(s.job, reason, message)
                if warn:
                    self.events.record(s.job, reason=reason, message=message, warning=True)
                return Result.done()
            case Enqueue(entry=entry, reason=reason, message=message, show_after=later):
                self.scheduling.submit(entry)
                if later is not None:
                    return Result.after(later)
                if reason:
                    await self.manager.set_waiting(s.job, reason, message)
                return Result.done()
            case RecordPlacement(worker=worker, demand=demand):
                return await self._record_placement(s, memory, worker, demand)
            case Adopt(worker=worker, demand=demand):
                return await self._adopt(s, memory, worker, demand)
            case RewriteView(differences=changed):
                return await self._rewrite_view(s, changed)
            case Book(worker=worker, demand=demand):
                if s.record is not None and s.record.problem:
                    log.warning("%s: placement record: %s; booking its demand as computed "
                                "now", s.key, s.record.problem, extra={"job": s.key})
                self.ledger.book(Booking(s.uid, s.key, worker, demand))
                return None
            case CreateMirror(worker=worker, demand=demand):
                return await self._create_mirror(s, memory, worker, demand)
            case SyncStatus():
                news, memory.status_news = memory.status_news, None
                await self.manager.set_placed(s.job, action.mirror, reason=action.reason,
                                              message=action.message, news_seen=news)
                return Result.done() if action.recheck is None else Result.after(action.recheck)
            case Hold(reason=reason, message=message):
                await self.manager.set_held(s.job, reason=reason, message=message)
                return Result.done()
            case Finish():
                await self._finish(s, action)
                # The rest (mirror deletion, record, finalizer) holds no quota: it waits
                # its turn behind the news and the placements already queued.
                return Result.after(0)
            case Unplace():
                return await self._unplace(s, memory, action)
            case Reject(worker=worker, reason=reason, message=message):
                return await self._reject(s, memory, worker, reason, message)
        raise AssertionError(f"no executor for {action!r}")

    def _release(self, uid: str) -> None:
        """The job holds no quota any more: its booking (a recorded placement or a
        reservation) and its queue entry go, and the scheduler looks again."""
        self.scheduling.withdraw(uid)
        if self.ledger.release(uid) is not None:
            self.scheduling.trigger()

    def _reachable(self, worker_name: str) -> bool:
        worker = self.registry.get(worker_name)
        return worker is not None and worker.usable()

    async def _delete_mirror(self, worker_name: str, mirror: JSON, memory: JobMemory) -> bool:
        """Delete our mirror on the worker; False when the worker cannot be asked now."""
        worker = self.registry.get(worker_name)
        if worker is None or not worker.usable():
            return False
        uid = mirror["metadata"]["uid"]
        memory.deleted_mirrors |= {uid}  # before the call: its DELETED event is no news
        try:
            deleted = await self.workers.delete_mirror(worker, mirror)
        except BaseException:
            memory.deleted_mirrors -= {uid}
            raise
        if not deleted:
            memory.deleted_mirrors -= {uid}
        memory.tombstone = None
        manager_uid = (mirror["metadata"].get("annotations") or {}).get(
            c.ANNOTATION_MANAGER_UID, "")
        self.bookkeeper.mirror_gone(worker_name, manager_uid)
        return True

    async def _delete_record(self, record: PlacementRecord, unclaimed: JSON | None) -> None:
        """The record goes once its mirror is gone (or given up on): the quota with it."""
        await self.manager.delete_record(record)
        self._release(record.uid)
        if unclaimed is not None:
            self.events.record(unclaimed, reason=c.REASON_NOT_CLAIMED,
                               message=f"no longer claimed by this dispatcher: its mirror on "
                                       f"worker {record.worker} was deleted", warning=True)

    async def _write_record(self, s: Claimed, *, worker: str, demand: dict[str, Any],
                            evictions: int | None = None, backoff: float = 0.0,
                            exclude: str = "", taken_off: tuple[str, str] = ("", ""),
                            priority: int | None = None) -> PlacementRecord:
        """The job's record as it is to be: placed on `worker` (or not, when empty), its
        requeue state carried over (exclusions still in force) and added to: `backoff`
        seconds before it is placed again, `exclude` kept off for
        `placement.rejectionBackoffSeconds`, `taken_off` the (reason, message) why; its
        `priority` the one given, else the one it had."""
        previous, now = s.record, self.clock.time()
        excluded = {name: until for name, until in
                    (previous.excluded if previous is not None else {}).items() if until > now}
        if exclude:
            excluded[exclude] = now + self.config.placement.rejection_backoff_seconds
        record = PlacementRecord(
            uid=s.uid, key=s.key, worker=worker, demand=dict(demand),
            evictions=(evictions if evictions is not None
                       else previous.evictions if previous is not None else 0),
            priority=(priority if priority is not None
                      else previous.priority if previous is not None else 0),
            not_before=now + backoff if backoff > 0 else 0.0, excluded=excluded,
            taken_off=taken_off)
        return await self.manager.write_record(record, previous=previous)

    async def _record_placement(self, s: Claimed, memory: JobMemory, worker: str,
                                demand: dict[str, Any]) -> Result | None:
        """The record first, then the job's view of it; the mirror only after both."""
        record = await self._write_record(s, worker=worker, demand=demand,
                                          priority=s.priority.value)
        self.scheduling.confirm(s.uid)
        memory.tombstone = memory.refused = None  # a new placement: old mirrors' news is old
        self.metrics.placements.labels(worker).inc()
        if memory.first_seen is not None:
            self.metrics.quota_wait.observe(self.clock.monotonic() - memory.first_seen)
        await self.manager.write_view(s.job, record)
        return None

    async def _adopt(self, s: Claimed, memory: JobMemory, worker: str,
                     demand: dict[str, Any]) -> Result | None:
        """A live mirror of the job runs on `worker` unrecorded (an earlier version kept
        placements in annotations): record it where it runs, whatever the quota says."""
        self._release(s.uid)  # no longer queued, nor reserved anywhere else
        record = await self._write_record(s, worker=worker, demand=demand,
                                          priority=s.priority.value)
        memory.refused = None
        self.ledger.book(Booking(s.uid, s.key, worker, demand))
        self.events.record(s.job, reason=c.REASON_ADOPTED,
                           message=f"a mirror of this job runs on worker {worker} without a "
                                   "placement record; recorded there", warning=True)
        await self.manager.write_view(s.job, record)
        return None

    async def _rewrite_view(self, s: Claimed, changed: tuple[str, ...]) -> Result | None:
        """Annotations and finalizer are a view of the record: an edit is undone."""
        message = ("; ".join(changed) + ". Rewritten from the placement record "
                   f"(Placement {s.uid} in the dispatcher's namespace): these annotations and "
                   "the finalizer are a read-only view of it")
        log.warning("%s: %s", s.key, message, extra={"job": s.key})
        self.metrics.edits_undone.inc()
        self.events.record(s.job, reason=c.REASON_EDIT_UNDONE, message=message, warning=True)
        updated = await self.manager.write_view(s.job, s.record)
        return Result.done() if updated is None else None

    async def _create_mirror(self, s: Claimed, memory: JobMemory, worker_name: str,
                             demand: dict[str, Any]) -> Result | None:
        worker = self.registry.get(worker_name)
        if worker is None or not worker.usable():
            return None  # it went since the decision: decide again
        outcome = await self.workers.create_mirror(s.job, worker, demand)
        if isinstance(outcome, Refused):
            memory.refused = Refusal(worker_name, outcome.reason, outcome.message)
            return None
        mirror, created = outcome
        self.bookkeeper.mirror_event(worker_name, "ADDED", mirror)
        if created:
            if memory.first_seen is not None:
                self.metrics.dispatch_latency.observe(self.clock.monotonic() - memory.first_seen)
                memory.first_seen = None
            self.events.record(s.job, reason=c.REASON_PLACED,
                               message=f"mirror created on worker {worker_name}")
        return None

    async def _finish(self, s: Claimed, action: Finish) -> None:
        """Final status sync; later the job leaves as finished (mirror deleted, record,
        finalizer).

        A finished mirror runs nothing, so its quota is released as soon as the manager
        records the end, as Kueue releases a finished Workload's: the next job need not
        wait for the mirror's deletion."""
        kind_of_end = action.finished.get("type")
        where = f"{kind_of_end} on worker {action.worker}"
        if retention_left(action.mirror, self.config.mirror, wall=s.wall, kind=self.kind) > 0:
            kept = ("until the job is deleted" if self.config.mirror.keep_finished
                    else f"for {self.config.mirror.retain_finished_seconds:g}s")
            where += f" ({logs_hint(s.key, action.mirror, kind=self.kind)}; kept {kept})"
        await self.manager.set_placed(s.job, action.mirror, reason=c.REASON_FINISHED,
                                      message=where)
        self._release(s.uid)
        self.events.record(s.job, reason=c.REASON_FINISHED,
                           message=f"{where}: {action.finished.get('reason', '')}",
                           warning=self.kind.failed(action.finished))

    async def _take_off(self, s: Claimed, why: tuple[str, str], *,
                        evictions: int | None = None, backoff: float = 0.0, exclude: str = ""
                        ) -> PlacementRecord:
        """The record says "not placed" (the mirror is gone), with the requeue state, in
        one write; the quota is released. What follows (the job's view and status) may
        fail without losing anything: the next decision writes them from the record."""
        record = await self._write_record(s, worker="", demand={}, evictions=evictions,
                                          backoff=backoff, exclude=exclude, taken_off=why)
        self._release(s.uid)
        return record

    async def _show_waiting(self, s: Claimed, record: PlacementRecord, reason: str,
                            message: str, *, extra: list[JSON] | None = None) -> bool:
        """The job's view of `record`, then its status; False when the job is gone."""
        updated = await self.manager.write_view(s.job, record)
        if updated is None:
            return False
        await self.manager.set_waiting(updated, reason, message, extra=extra)
        return True

    async def _unplace(self, s: Claimed, memory: JobMemory, action: Unplace) -> Result | None:
        """The record first (not placed, with the requeue state), then the mirror goes:
        a crash between the two leaves a live mirror of a job not placed, which the
        ledger still counts and the garbage collector deletes, never a placement whose
        mirror is missing (which would be made again)."""
        if action.mirror is not None and not self._reachable(action.worker):
            return None  # its worker went since the decision: decide again
        memory.tombstone = None
        backoff = action.backoff if action.count_requeue else 0.0
        record = await self._take_off(s, (action.reason, action.message),
                                      evictions=action.evictions, backoff=backoff,
                                      exclude=action.worker if action.exclude else "")
        if action.mirror is not None and not await self._delete_mirror(
                action.worker, action.mirror, memory):
            return None  # it went in between: the GC deletes the mirror once it is back
        if action.event_reason:
            self.events.record(s.job, reason=action.event_reason, message=action.message,
                               warning=True)
            log.warning("%s taken off %s (%s): %s", s.key, action.worker, action.reason,
                        action.message, extra={"job": s.key, "worker": action.worker})
        if action.preemptor:
            self.metrics.preemptions.labels(action.worker).inc()
            preemptor = self.trainjobs.get(action.preemptor)
            if preemptor is not None:
                self.events.record(preemptor, reason=c.REASON_PREEMPTING,
                                   message=f"preempted {s.key} on worker {action.worker}")
        if action.eviction:
            self.metrics.evictions.labels(action.worker, action.reason).inc()
        if action.count_requeue:
            self.metrics.requeues.labels(action.reason).inc()
        extra = ([self.kind.failed_condition(
            c.REASON_TOO_MANY_EVICTIONS, f"evicted {action.evictions} times; last: "
            f"{action.message}", self.manager.now())] if action.fail else [])
        if not await self._show_waiting(s, record, action.reason, action.message,
                                        extra=extra) or not action.count_requeue:
            return Result.done()
        return Result.after(backoff)

    async def _reject(self, s: Claimed, memory: JobMemory, worker: str, reason: str,
                      message: str) -> Result | None:
        """The worker refused the mirror: try the others for a while, not this one."""
        memory.refused = None
        record = await self._take_off(s, (reason, message), exclude=worker)
        self.metrics.dispatch_errors.labels(worker, reason).inc()
        self.events.record(s.job, reason=reason, message=message, warning=True)
        log.warning("%s: %s", s.key, message, extra={"job": s.key, "worker": worker})
        return None if await self._show_waiting(s, record, reason, message) else Result.done()
