"""The jobs controller: watch events become keys; each key is snapshot -> decide -> act.

Events from the manager's and the workers' watches only enqueue keys (news about a
running job in the urgent lane, a placement the scheduler made in the prompt one).
`reconcile(key)` reads a `JobSnapshot` from the caches, asks the pure `decide` what to
do, and carries the action out with the manager writer or the worker writer; an action
that changed the state (placement recorded, mirror created, ...) is followed at once by
the next decision on the new state, so a new job goes from queued to mirrored in one
reconcile; a finished job's clean-up waits its turn in the ordinary lane. A 409 goes
back to the work queue's per-key backoff. The only per-job state is each job's
`JobMemory`, forgotten on every exit.

The mirror watches also keep the ledger's count of live mirrors (`Ledger.mirror_seen`):
every unfinished mirror of ours counts on its worker, recorded or not.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.conditions import condition
from dispatcher.api.placement import PlacementRecord
from dispatcher.claim import Claim
from dispatcher.clock import Clock
from dispatcher.config import DispatcherConfig
from dispatcher.controllers.jobs.decide import (
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
    RecordPlacement,
    Reject,
    Requeue,
    RewriteView,
    SyncStatus,
    Unplace,
    Wait,
    decide,
)
from dispatcher.controllers.jobs.manager_side import Conflict, ManagerWriter
from dispatcher.controllers.jobs.memory import JobMemories, JobMemory
from dispatcher.controllers.jobs.priority import PriorityCache
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.jobs.snapshot import JobSnapshot, SnapshotReader
from dispatcher.controllers.jobs.worker_side import Refused, WorkerWriter
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.controllers.workers import WorkerConnection, WorkerRegistry
from dispatcher.kinds import JobKind
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import DELETED, Informer, object_key
from dispatcher.kube.workqueue import Lane, Result, WorkQueue
from dispatcher.observability.events import EventRecorder
from dispatcher.observability.metrics import Metrics
from dispatcher.placement import resources
from dispatcher.placement.ledger import Booking, Ledger
from dispatcher.placement.scheduler import PendingJob
from dispatcher.placement.validation import DemandError, checked_vector_text

log = logging.getLogger(__name__)
JSON = dict[str, Any]
REASON_NEW = "New"
"""The metric's label for claimed jobs that have no Dispatched condition yet."""
_MAX_STEPS = 8


class JobsController:
    def __init__(
        self,
        *,
        config: DispatcherConfig,
        claim: Claim,
        manager: ClusterClient,
        registry: WorkerRegistry,
        kind: JobKind,
        ledger: Ledger,
        scheduling: SchedulingLoop,
        trainjobs: Informer,
        records: PlacementRecords,
        runtimes: dict[str, Informer],
        queue: WorkQueue,
        events: EventRecorder,
        metrics: Metrics,
        clock: Clock,
    ) -> None:
        self.config = config
        self.claim = claim
        self.registry = registry
        self.kind = kind
        self.ledger = ledger
        self.scheduling = scheduling
        self.trainjobs = trainjobs
        self.records = records
        self.queue = queue
        self.events = events
        self.metrics = metrics
        self.clock = clock
        self.memories = JobMemories()
        self.reader = SnapshotReader(
            config=config, claim=claim, kind=kind, trainjobs=trainjobs, records=records,
            runtimes=runtimes, registry=registry, ledger=ledger, scheduling=scheduling,
            priorities=PriorityCache(manager, clock=clock), clock=clock)
        self.manager = ManagerWriter(kind=kind, trainjobs=trainjobs, records=records,
                                     events=events, metrics=metrics, clock=clock)
        self.workers = WorkerWriter(kind=kind, origin=config.mirror.origin,
                                    create_namespaces=config.workers.create_namespaces,
                                    metrics=metrics)

    def claimed(self, job: JSON) -> bool:
        return self.claim.claims(job)

    # ----- event handlers: map to keys and enqueue -----

    def on_job_event(self, event_type: str, obj: JSON) -> None:
        key = object_key(obj)
        if not self.claimed(obj) and not self.records.of_job(key):
            return
        uid = obj["metadata"]["uid"]
        if event_type == DELETED:
            # Its record, if any, is cleaned up by the reconcile: the mirror goes first,
            # and the quota is released only then.
            self.scheduling.withdraw(uid)
            self.memories.forget(uid)
        else:
            memory = self.memories.of(uid)
            if memory.first_seen is None:
                memory.first_seen = self.clock.monotonic()
        self.queue.add(key)

    def on_record_event(self, event_type: str, obj: JSON) -> None:
        """A placement record changed (ours, or an admin's hand): look at its job again."""
        job = (obj.get("spec") or {}).get("job") or {}
        if job.get("namespace") and job.get("name"):
            self.queue.add(f"{job['namespace']}/{job['name']}")

    def _memory_of_mirror(self, mirror: JSON) -> JobMemory | None:
        """The memory of the live manager job `mirror` belongs to, if there is one."""
        job = self.trainjobs.get(object_key(mirror))
        manager_uid = (mirror["metadata"].get("annotations") or {}).get(
            c.ANNOTATION_MANAGER_UID)
        if job is None or job["metadata"]["uid"] != manager_uid or not self.claimed(job):
            return None
        return self.memories.of(manager_uid)

    def on_mirror_event(self, worker: str, event_type: str, obj: JSON) -> None:
        self._count_mirror(worker, event_type, obj)
        memory = self._memory_of_mirror(obj)
        if memory is not None:
            if event_type == DELETED:
                uid = obj["metadata"].get("uid", "")
                if uid in memory.deleted_mirrors:
                    memory.deleted_mirrors.discard(uid)
                else:
                    memory.tombstone = (worker, obj)
            else:
                if memory.tombstone is not None and memory.tombstone[0] == worker:
                    memory.tombstone = None
                if memory.status_news is None:
                    memory.status_news = self.clock.monotonic()
        self.queue.add(object_key(obj), lane=Lane.URGENT)  # news about a running job

    def _count_mirror(self, worker: str, event_type: str, obj: JSON) -> None:
        """Keep the ledger's count of the live mirrors on `worker` (facts, not opinions)."""
        metadata = obj["metadata"]
        uid = (metadata.get("annotations") or {}).get(c.ANNOTATION_MANAGER_UID)
        if not uid or not self.kind.is_ours(obj, manager_uid=None,
                                            origin=self.config.mirror.origin):
            return
        if event_type == DELETED or self.kind.finished(obj.get("status")) is not None:
            if self.ledger.mirror_gone(worker, uid):
                self.scheduling.trigger()
            return
        if not self.ledger.counts_mirror(worker, uid):  # a mirror's demand never changes
            self.ledger.mirror_seen(worker, uid, object_key(obj), self.mirror_demand(obj, uid))

    def mirror_demand(self, mirror: JSON, uid: str) -> dict[str, Any]:
        """What a live mirror holds: the demand it was created with, else what its spec
        needs with the manager's runtime of that name, else its job's booking."""
        text = (mirror["metadata"].get("annotations") or {}).get(c.ANNOTATION_DEMAND)
        if text:
            try:
                return checked_vector_text(text, path=f"annotation {c.ANNOTATION_DEMAND}")
            except DemandError:
                pass
        _, runtime = self.reader.runtime_of(mirror)
        computed, _ = self.reader.demand(mirror, runtime, None)
        booking = self.ledger.get(uid)
        return resources.maximum([computed or {}, booking.demand if booking else {}])

    def on_workload_news(self, worker: str, key: str) -> None:
        """A Kueue Workload on `worker` changed: news about the job `key` if its mirror is
        there; in any case the worker's room may have changed."""
        job = self.trainjobs.get(key)
        booking = self.ledger.get(job["metadata"]["uid"]) if job is not None else None
        if booking is not None and booking.worker == worker:
            self.queue.add(key, lane=Lane.URGENT)
        self.scheduling.trigger()

    def on_runtime_event(self, event_type: str, obj: JSON) -> None:
        """A runtime came, changed or went: look again at the unplaced jobs that use it."""
        ref = (obj.get("kind"), object_key(obj))
        for job in list(self.trainjobs.store.values()):
            if (self.claimed(job) and job["metadata"]["uid"] not in self.ledger
                    and self.kind.runtime_ref(job) == ref):
                self.queue.add(object_key(job))

    def on_worker_change(self, worker: WorkerConnection) -> None:
        """A worker came, went or changed: re-examine its jobs and schedule again."""
        for booking in self.ledger.jobs_on(worker.name):
            self.queue.add(booking.key)
        self.scheduling.trigger()

    def on_decision(self, key: str, *, placed: bool) -> None:
        """The scheduler placed the job (its quota is booked and idle until the mirror
        exists: ahead of new jobs) or says why it waits."""
        self.queue.add(key, lane=Lane.PROMPT if placed else Lane.ORDINARY)

    # ----- reconcile: snapshot -> decide -> act -----

    async def reconcile(self, key: str) -> Result:
        for _ in range(_MAX_STEPS):
            job = self.trainjobs.get(key)
            memory = (self.memories.of(job["metadata"]["uid"])
                      if job is not None and self.claimed(job) else None)
            snapshot = await self.reader.read(key, memory)
            action = decide(snapshot, memory or JobMemory(), self.config, kind=self.kind)
            try:
                result = await self._act(snapshot, memory or JobMemory(), action)
            except Conflict as conflict:
                log.debug("%s; deciding again after the key's backoff", conflict)
                return Result.retry()
            if result is not None:
                return result
        return Result.retry()

    async def _act(self, s: JobSnapshot, memory: JobMemory, action: Action) -> Result | None:
        """Carry out `action`; None means the state changed: decide again at once."""
        match action:
            case Forget():
                if s.job is not None:
                    self.scheduling.withdraw(s.uid)
                    self.memories.forget(s.uid)
                return Result.done()
            case Requeue(seconds=seconds):
                return Result.after(seconds)
            case Wait(reason=reason, message=message, warn=warn):
                assert s.job is not None
                self.scheduling.withdraw(s.uid)
                await self.manager.set_waiting(s.job, reason, message, warn=warn)
                return Result.done()
            case Enqueue(entry=entry):
                return await self._enqueue(s, entry)
            case RecordPlacement(worker=worker, demand=demand):
                return await self._record_placement(s, memory, worker, demand)
            case Adopt(worker=worker):
                return await self._adopt(s, worker)
            case RewriteView(differences=changed):
                return await self._rewrite_view(s, changed)
            case Book(worker=worker):
                assert s.job is not None
                self.ledger.book(Booking(s.uid, s.key, worker, self.booked_demand(s.job, s)))
                return None
            case CreateMirror(worker=worker):
                return await self._create_mirror(s, memory, worker)
            case SyncStatus():
                return await self._sync_status(s, memory, action)
            case Hold(reason=reason, message=message):
                assert s.job is not None
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
            case DeleteMirror(worker=worker, uid=uid):
                await self._delete_mirror(worker, s.key, uid, memory)
                return None
            case DeleteRecord(record=record):
                await self._delete_record(s, record)
                return None
            case DropFinalizer():
                assert s.job is not None
                await self.manager.drop_finalizer(s.job)
                if s.claimed:
                    self.memories.forget(s.uid)
                return None if s.leftover is not None else Result.done()
        raise AssertionError(f"no executor for {action!r}")

    def _release(self, uid: str) -> None:
        self.ledger.release(uid)
        self.scheduling.withdraw(uid)
        self.scheduling.trigger()

    async def _delete_mirror(self, worker_name: str, key: str, uid: str,
                             memory: JobMemory) -> bool:
        """Delete our mirror of job `uid` on the worker; True when it is gone."""
        worker = self.registry.get(worker_name)
        gone = await self.workers.delete_mirror(worker, key, uid, memory)
        if gone and self.ledger.mirror_gone(worker_name, uid):
            self.scheduling.trigger()
        return gone

    async def _delete_record(self, s: JobSnapshot, record: PlacementRecord) -> None:
        """The record goes once its mirror is gone (or given up on): the quota with it."""
        await self.manager.delete_record(record)
        self._release(record.uid)
        if s.job is not None and s.leftover is record and record.placed and (
                s.job["metadata"]["uid"] == record.uid):
            self.events.record(s.job, reason=c.REASON_NOT_CLAIMED,
                               message=f"no longer claimed by this dispatcher: its mirror on "
                                       f"worker {record.worker} was deleted", warning=True)

    async def _write_record(self, s: JobSnapshot, *, worker: str,
                            demand: dict[str, Any], evictions: int | None = None
                            ) -> PlacementRecord:
        previous = s.record
        record = PlacementRecord(
            uid=s.uid, key=s.key, worker=worker, demand=dict(demand),
            evictions=(evictions if evictions is not None
                       else previous.evictions if previous is not None else 0))
        return await self.manager.write_record(record, previous=previous)

    async def _enqueue(self, s: JobSnapshot, entry: PendingJob) -> Result:
        assert s.job is not None
        self.scheduling.submit(entry)
        decision = self.scheduling.decisions.get(s.uid)
        if decision is not None:
            where = f" (position {decision.position} in the queue)" if decision.position else ""
            await self.manager.set_waiting(s.job, decision.reason, decision.message + where)
        return Result.done()

    async def _record_placement(self, s: JobSnapshot, memory: JobMemory, worker: str,
                                demand: dict[str, Any]) -> Result | None:
        """The record first, then the job's view of it; the mirror only after both."""
        assert s.job is not None
        record = await self._write_record(s, worker=worker, demand=demand)
        self.scheduling.confirm(s.uid)
        memory.tombstone = None
        self.metrics.placements.labels(worker).inc()
        if memory.first_seen is not None:
            self.metrics.quota_wait.observe(self.clock.monotonic() - memory.first_seen)
        await self.manager.write_view(s.job, record)
        return None

    async def _adopt(self, s: JobSnapshot, worker: str) -> Result | None:
        """A live mirror of the job runs on `worker` unrecorded (an earlier version kept
        placements in annotations): record it where it runs, whatever the quota says."""
        assert s.job is not None
        self.scheduling.withdraw(s.uid)
        connection = self.registry.get(worker)
        mirror = connection.mirrors.get(s.key) if connection and connection.mirrors else None
        held = self.mirror_demand(mirror, s.uid) if mirror is not None else {}
        demand = resources.maximum([held, s.demand or {}])
        record = await self._write_record(s, worker=worker, demand=demand)
        self.ledger.book(Booking(s.uid, s.key, worker, demand))
        self.events.record(s.job, reason=c.REASON_ADOPTED,
                           message=f"a mirror of this job runs on worker {worker} without a "
                                   "placement record; recorded there", warning=True)
        await self.manager.write_view(s.job, record)
        return None

    async def _rewrite_view(self, s: JobSnapshot, changed: tuple[str, ...]) -> Result | None:
        """Annotations and finalizer are a view of the record: an edit is undone."""
        assert s.job is not None
        message = ("; ".join(changed) + ". Rewritten from the placement record "
                   f"(Placement {s.uid} in the dispatcher's namespace): these annotations and "
                   "the finalizer are a read-only view of it")
        log.warning("%s: %s", s.key, message, extra={"job": s.key})
        self.metrics.edits_undone.inc()
        self.events.record(s.job, reason=c.REASON_EDIT_UNDONE, message=message, warning=True)
        updated = await self.manager.write_view(s.job, s.record)
        return Result.done() if updated is None else None

    async def _create_mirror(self, s: JobSnapshot, memory: JobMemory,
                             worker_name: str) -> Result | None:
        assert s.job is not None and s.record is not None
        worker = self.registry.get(worker_name)
        assert worker is not None
        outcome = await self.workers.create_mirror(s.job, worker, s.record.demand)
        if isinstance(outcome, Refused):
            return await self._reject(s, memory, worker_name, outcome.reason, outcome.message)
        mirror, created = outcome
        self._count_mirror(worker_name, "ADDED", mirror)
        if created:
            if memory.first_seen is not None:
                self.metrics.dispatch_latency.observe(self.clock.monotonic() - memory.first_seen)
                memory.first_seen = None
            self.events.record(s.job, reason=c.REASON_PLACED,
                               message=f"mirror created on worker {worker_name}")
        return None

    async def _sync_status(self, s: JobSnapshot, memory: JobMemory, action: SyncStatus
                           ) -> Result:
        assert s.job is not None
        news, memory.status_news = memory.status_news, None
        done = Result.done() if action.recheck is None else Result.after(action.recheck)
        previous = condition(s.job.get("status"), c.CONDITION_DISPATCHED)
        if (action.reason == c.REASON_PLACED and previous is None
                and not self.kind.remote_status(action.mirror)):
            return done  # nothing to tell yet: no status on the mirror
        await self.manager.set_placed(s.job, action.mirror, reason=action.reason,
                                      message=action.message, news_seen=news)
        return done

    async def _finish(self, s: JobSnapshot, action: Finish) -> None:
        """Final status sync; later the job leaves as finished (mirror deleted, record,
        finalizer).

        A finished mirror runs nothing, so its quota is released as soon as the manager
        records the end, as Kueue releases a finished Workload's: the next job need not
        wait for the mirror's deletion."""
        assert s.job is not None
        kind_of_end = action.finished.get("type")
        await self.manager.set_placed(s.job, action.mirror, reason=c.REASON_FINISHED,
                                      message=f"{kind_of_end} on worker {action.worker}")
        self._release(s.uid)
        self.events.record(s.job, reason=c.REASON_FINISHED,
                           message=f"{kind_of_end} on worker {action.worker}: "
                                   f"{action.finished.get('reason', '')}",
                           warning=self.kind.failed(action.finished))

    async def _take_off(self, s: JobSnapshot, *, evictions: int | None = None
                        ) -> JSON | None:
        """The record says "not placed" (the mirror is gone), then the job's view; the
        quota is released. The job as written, None when it is gone."""
        assert s.job is not None
        record = await self._write_record(s, worker="", demand={}, evictions=evictions)
        self.ledger.release(s.uid)
        self.scheduling.trigger()
        return await self.manager.write_view(s.job, record)

    async def _unplace(self, s: JobSnapshot, memory: JobMemory, action: Unplace) -> Result:
        assert s.job is not None
        worker = self.registry.get(action.worker)
        deleted = await self._delete_mirror(action.worker, s.key, s.uid, memory)
        if not deleted and worker is not None and worker.lost_since is None:
            return Result.after(self.config.workers.probe_interval_seconds)
        updated = await self._take_off(s, evictions=action.evictions)
        if updated is None:
            return Result.done()
        memory.tombstone = None
        extra = ([self.kind.failed_condition(
            c.REASON_TOO_MANY_EVICTIONS, f"evicted {action.evictions} times; last: "
            f"{action.message}", self.manager.now())] if action.fail else [])
        await self.manager.set_waiting(updated, action.reason, action.message, extra=extra)
        if action.exclude:
            memory.excluded[action.worker] = (
                self.clock.monotonic() + self.config.placement.rejection_backoff_seconds)
        if not action.eviction and not action.exclude:
            return Result.done()
        self.metrics.requeues.labels(action.reason).inc()
        self.events.record(updated, reason=c.REASON_EVICTED if action.eviction else action.reason,
                           message=action.message, warning=True)
        log.warning("%s %s from %s: %s", "evicted" if action.eviction else "moved", s.key,
                    action.worker, action.message,
                    extra={"job": s.key, "worker": action.worker})
        if action.eviction:
            self.metrics.evictions.labels(action.worker, action.reason).inc()
        memory.not_before = self.clock.monotonic() + action.backoff
        return Result.after(action.backoff)

    async def _reject(self, s: JobSnapshot, memory: JobMemory, worker: str, reason: str,
                      message: str) -> Result | None:
        """The worker refused the mirror: try the others for a while, not this one."""
        assert s.job is not None
        memory.excluded[worker] = (self.clock.monotonic()
                                   + self.config.placement.rejection_backoff_seconds)
        self.metrics.dispatch_errors.labels(worker, reason).inc()
        self.events.record(s.job, reason=reason, message=message, warning=True)
        log.warning("%s: %s", s.key, message, extra={"job": s.key, "worker": worker})
        updated = await self._take_off(s)
        if updated is None:
            return Result.done()
        await self.manager.set_waiting(updated, reason, message)
        return None

    # ----- the ledger and the counts, from the caches -----

    def booked_demand(self, job: JSON, snapshot: JobSnapshot | None = None
                      ) -> dict[str, Any]:
        """What a placed job holds: its recorded demand, but never less than what the job
        needs now (its runtime may have changed since)."""
        record = snapshot.record if snapshot is not None else self.records.of_uid(
            job["metadata"]["uid"])
        if record is not None and record.problem:
            log.warning("%s: placement record: %s; booking its demand as computed now",
                        object_key(job), record.problem, extra={"job": object_key(job)})
        recorded = record.demand if record is not None else {}
        computed = snapshot.demand if snapshot is not None else None
        if snapshot is None:
            _, runtime = self.reader.runtime_of(job)
            computed, _ = self.reader.demand(job, runtime, None)
        return resources.maximum([recorded, computed or {}])

    def rebuild_ledger(self) -> int:
        """Book every placement on record but those of finished jobs; before any
        placement. (The live mirrors are counted as the workers' caches fill.)"""
        booked = 0
        for record in self.records.all():
            if not record.placed:
                continue
            job = self.trainjobs.get(record.key)
            if job is not None and job["metadata"]["uid"] == record.uid:
                if self.kind.finished(job.get("status")) is not None:
                    continue
                demand = self.booked_demand(job)
            else:
                demand = record.demand
            self.ledger.book(Booking(record.uid, record.key, record.worker, demand))
            booked += 1
        return booked

    def reasons(self) -> collections.Counter[str]:
        """Claimed, unfinished jobs by their Dispatched reason, from the cache."""
        counts: collections.Counter[str] = collections.Counter()
        for job in self.trainjobs.store.values():
            if self.claimed(job) and self.kind.finished(job.get("status")) is None:
                dispatched = condition(job.get("status"), c.CONDITION_DISPATCHED) or {}
                counts[dispatched.get("reason") or REASON_NEW] += 1
        return counts
