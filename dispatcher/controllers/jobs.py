"""The life of a claimed TrainJob: wait, place, mirror, sync, finish, evict, delete.

`reconcile(key)` is level-triggered: it re-reads the manager TrainJob and its mirror
from the caches and moves one step toward the desired state, in this order:
- deleted on the manager: delete the mirror, then drop the finalizer;
- finished on the manager: make sure the mirror is gone and the quota released;
- not placed: size it, queue it, and once the scheduling loop reserved a worker, record
  the placement (annotation + finalizer, one write) before any remote write;
- placed: create the mirror if missing (idempotently), copy its status back when it
  changed, finish when it reports Complete or Failed, evict when its worker is lost or
  the mirror was deleted or evicted remotely.
Events from both the manager's and the workers' watches only enqueue keys.
"""

from __future__ import annotations

import collections
import logging
import time
from fractions import Fraction
from typing import Any, TypeAlias

from kubeflow_trainer_api import models
from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api.kueue import PRIORITY_CLASSES, WORKLOAD_PRIORITY_CLASSES
from dispatcher.api.trainer import CONDITION_FAILED
from dispatcher.config import DispatcherConfig
from dispatcher.controllers import status as st
from dispatcher.controllers.leaving import LeavingWorker, annotations_of, job_key
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.controllers.trainjob_kind import JobKind, condition
from dispatcher.controllers.workers import WorkerConnection, WorkerRegistry
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import DELETED, Informer
from dispatcher.kube.resource import NAMESPACES, Resource, message_of
from dispatcher.kube.workqueue import Result, WorkQueue
from dispatcher.observability.events import EventRecorder
from dispatcher.observability.metrics import Metrics
from dispatcher.placement import resources
from dispatcher.placement.demand import DemandError, demand_with_spec, parse_runtime
from dispatcher.placement.ledger import Booking, Ledger
from dispatcher.placement.scheduler import Decision, PendingJob
from dispatcher.placement.selector import SelectorError, parse_selector
from dispatcher.placement.validation import checked_vector_text

log = logging.getLogger(__name__)
JSON = dict[str, Any]
_REJECTION_CODES = {400, 403, 404, 409, 422}
_PRIORITY_CACHE_SECONDS = 30.0
REASON_NEW = "New"
"""The metric's label for claimed jobs that have no Dispatched condition yet."""
RuntimeSpec: TypeAlias = models.TrainerV1alpha1TrainingRuntimeSpec


class JobsController(LeavingWorker):
    def __init__(
        self,
        *,
        config: DispatcherConfig,
        manager: ClusterClient,
        registry: WorkerRegistry,
        kind: JobKind,
        ledger: Ledger,
        scheduling: SchedulingLoop,
        trainjobs: Informer,
        cluster_runtimes: Informer,
        runtimes: Informer,
        queue: WorkQueue,
        events: EventRecorder,
        metrics: Metrics,
    ) -> None:
        self.config = config
        self.manager = manager
        self.registry = registry
        self.kind = kind
        self.ledger = ledger
        self.scheduling = scheduling
        self.trainjobs = trainjobs
        self.cluster_runtimes = cluster_runtimes
        self.runtimes = runtimes
        self.queue = queue
        self.events = events
        self.metrics = metrics
        self._priorities: dict[str, tuple[int, float]] = {}
        self._jobs = Resource(manager, kind.kind)
        self._claim_selector = parse_selector(config.claim.label_selector)
        self._tombstones: dict[tuple[str, str], JSON] = {}
        self._runtime_waiters: set[str] = set()
        self._demands: dict[str, tuple[int, dict[str, Fraction]]] = {}
        self._runtime_specs: dict[str, tuple[str, RuntimeSpec]] = {}
        self._excluded: dict[str, dict[str, float]] = {}
        self._not_before: dict[str, float] = {}
        self._namespaces: dict[str, set[str]] = {}
        self._status_seen: dict[str, float] = {}
        self._first_seen: dict[str, float] = {}
        self._deleted_mirrors: set[str] = set()
        """UIDs of mirrors this process deleted: their DELETED events are no news."""

    # ----- event handlers: map to keys and enqueue -----

    def on_job_event(self, event_type: str, obj: JSON) -> None:
        if not self.claimed(obj):
            return
        key = job_key(obj)
        self._first_seen.setdefault(obj["metadata"]["uid"], time.monotonic())
        if event_type == DELETED:
            self.scheduling.withdraw(obj["metadata"]["uid"])
        self.queue.add(key)

    def on_mirror_event(self, worker: str, event_type: str, obj: JSON) -> None:
        key = job_key(obj)
        if event_type == DELETED:
            uid = obj["metadata"].get("uid")
            if uid in self._deleted_mirrors:
                self._deleted_mirrors.discard(uid)
            else:
                self._tombstones[(worker, key)] = obj
        else:
            self._tombstones.pop((worker, key), None)
            self._status_seen.setdefault(key, time.monotonic())
        self.queue.add(key, urgent=True)  # news about a running job: ahead of new jobs

    def on_runtime_event(self, event_type: str, obj: JSON) -> None:
        waiters, self._runtime_waiters = self._runtime_waiters, set()
        for key in waiters:
            self.queue.add(key)

    def on_worker_change(self, worker: WorkerConnection) -> None:
        """A worker came, went or changed: re-examine its jobs and schedule again."""
        for booking in self.ledger.jobs_on(worker.name):
            self.queue.add(booking.key)
        self.scheduling.trigger()

    def on_decision(self, decision: Decision) -> None:
        self.queue.add(decision.key)

    # ----- claim -----

    def claimed(self, job: JSON) -> bool:
        spec = job.get("spec") or {}
        if spec.get("managedBy") != self.config.claim.managed_by:
            return False
        metadata = job["metadata"]
        namespaces = self.config.claim.namespaces
        if namespaces and metadata.get("namespace") not in namespaces:
            return False
        return self._claim_selector(metadata.get("labels") or {})

    def reasons(self) -> collections.Counter[str]:
        """Claimed, unfinished jobs by their Dispatched reason, from the cache."""
        counts: collections.Counter[str] = collections.Counter()
        for job in self.trainjobs.store.values():
            if self.claimed(job) and self.kind.finished(job.get("status")) is None:
                dispatched = condition(job.get("status"), c.CONDITION_DISPATCHED) or {}
                counts[dispatched.get("reason") or REASON_NEW] += 1
        return counts

    # ----- reconcile -----

    async def reconcile(self, key: str) -> Result:
        job = self.trainjobs.get(key)
        if job is None or not self.claimed(job):
            return Result.done()
        worker = annotations_of(job).get(c.ANNOTATION_CLUSTER)
        has_finalizer = c.FINALIZER in (job["metadata"].get("finalizers") or [])
        if job["metadata"].get("deletionTimestamp"):
            return await self._on_deleted(job, worker if has_finalizer else None)
        if self.kind.finished(job.get("status")):
            return await self._on_finished_manager(job, worker if has_finalizer else None)
        if worker and has_finalizer:
            return await self._sync_placed(job, worker)
        return await self._ensure_pending(job)

    # ----- waiting and placing -----

    def _runtime(self, job: JSON) -> JSON | None:
        ref = job["spec"].get("runtimeRef") or {}
        if ref.get("kind", "ClusterTrainingRuntime") == "TrainingRuntime":
            return self.runtimes.get(f"{job['metadata']['namespace']}/{ref.get('name')}")
        return self.cluster_runtimes.get(str(ref.get("name")))

    async def _set_waiting(self, job: JSON, reason: str, message: str, *,
                           warn: bool = False) -> None:
        """Dispatched=False with `reason`; with `warn`, a Warning event when it is news."""
        previous = condition(job.get("status"), c.CONDITION_DISPATCHED) or {}
        dispatched = st.dispatched_condition(job, placed=False, reason=reason, message=message)
        await self._write_status(job, st.without_mirror(job, dispatched))
        if warn and (previous.get("reason"), previous.get("message")) != (
                reason, dispatched["message"]):
            self.events.record(job, reason=reason, message=message, warning=True)

    def _demand(self, job: JSON, runtime: JSON) -> dict[str, Fraction]:
        uid = job["metadata"]["uid"]
        generation = job["metadata"].get("generation", 0)
        cached = self._demands.get(uid)
        if cached and cached[0] == generation:
            return cached[1]
        runtime_name = f"{runtime.get('kind')} {runtime['metadata']['name']!r}"
        demand = demand_with_spec(job, self._runtime_spec(runtime),
                                  mode=self.config.placement.demand_mode,
                                  runtime_name=runtime_name)
        self._demands[uid] = (generation, demand)
        return demand

    def _runtime_spec(self, runtime: JSON) -> RuntimeSpec:
        """The parsed runtime, parsed once per version of it."""
        metadata = runtime["metadata"]
        key = f"{runtime.get('kind')}/{metadata.get('namespace', '')}/{metadata['name']}"
        version = metadata.get("resourceVersion", "")
        cached = self._runtime_specs.get(key)
        if cached is None or cached[0] != version:
            cached = (version, parse_runtime(runtime))
            self._runtime_specs[key] = cached
        return cached[1]

    async def _priority(self, job: JSON) -> int:
        """Value of the WorkloadPriorityClass, else the PriorityClass, the job's
        `kueue.x-k8s.io/priority-class` label names; 0 without one. Cached briefly."""
        name = (job["metadata"].get("labels") or {}).get(c.LABEL_PRIORITY_CLASS)
        if not name:
            return 0
        now = time.monotonic()
        cached = self._priorities.get(name)
        if cached is not None and cached[1] > now:
            return cached[0]
        value = 0
        for kind in (WORKLOAD_PRIORITY_CLASSES, PRIORITY_CLASSES):
            found = await Resource(self.manager, kind).get(name)
            if found is not None:
                value = int(found.get("value") or 0)
                break
        self._priorities[name] = (value, now + _PRIORITY_CACHE_SECONDS)
        return value

    def _pending_entry(self, job: JSON, demand: dict[str, Fraction],
                       priority: int) -> PendingJob:
        uid = job["metadata"]["uid"]
        selector_text = annotations_of(job).get(c.ANNOTATION_CLUSTER_SELECTOR, "")
        try:
            selector = parse_selector(selector_text)
        except SelectorError as error:
            raise DemandError(f"annotation {c.ANNOTATION_CLUSTER_SELECTOR}: {error}",
                              reason=c.REASON_INVALID_CLUSTER_SELECTOR) from None
        now = time.monotonic()
        excluded = frozenset(w for w, until in self._excluded.get(uid, {}).items() if until > now)
        return PendingJob(
            key=job_key(job),
            uid=uid,
            demand=demand,
            priority=priority,
            created=job["metadata"].get("creationTimestamp", ""),
            selector=selector,
            excluded=excluded,
        )

    async def _ensure_pending(self, job: JSON) -> Result:
        key, uid = job_key(job), job["metadata"]["uid"]
        if job["spec"].get("suspend"):
            self.scheduling.withdraw(uid)
            await self._set_waiting(job, c.REASON_SUSPENDED, "suspended: not dispatched")
            return Result.done()
        runtime = self._runtime(job)
        if runtime is None:
            self.scheduling.withdraw(uid)
            self._runtime_waiters.add(key)
            ref = job["spec"].get("runtimeRef") or {}
            await self._set_waiting(job, c.REASON_RUNTIME_NOT_FOUND,
                                    f"{ref.get('kind')} {ref.get('name')!r} does not exist "
                                    "on the manager; the job is placed once it does")
            return Result.done()
        try:
            demand = self._demand(job, runtime)
            entry = self._pending_entry(job, demand, await self._priority(job))
        except DemandError as error:
            self.scheduling.withdraw(uid)
            await self._set_waiting(job, error.reason, f"not dispatched: {error}", warn=True)
            return Result.done()
        delay = self._not_before.get(uid, 0) - time.monotonic()
        if delay > 0:
            return Result.after(delay)
        worker = self.scheduling.reservation(uid)
        if worker is not None:
            return await self._record_placement(job, worker, demand)
        self.scheduling.submit(entry)
        decision = self.scheduling.decisions.get(uid)
        if decision is not None:
            where = f" (position {decision.position} in the queue)" if decision.position else ""
            await self._set_waiting(job, decision.reason, decision.message + where)
        return Result.done()

    async def _record_placement(self, job: JSON, worker: str,
                                demand: dict[str, Fraction]) -> Result:
        """Annotation and finalizer on the manager, in one write, before the mirror."""
        metadata = job["metadata"]
        finalizers = [*(metadata.get("finalizers") or []), c.FINALIZER]
        patch = {"metadata": {
            "resourceVersion": metadata["resourceVersion"],
            "finalizers": list(dict.fromkeys(finalizers)),
            "annotations": {c.ANNOTATION_CLUSTER: worker,
                            c.ANNOTATION_DEMAND: resources.format_vector(demand)},
        }}
        try:
            updated = await self._jobs.merge_patch(metadata["name"], patch,
                                                   namespace=metadata["namespace"])
        except ApiException as error:
            if error.status == 404:
                self.scheduling.withdraw(metadata["uid"])
                return Result.done()
            if error.status == 409:
                return Result.after(0.05)
            raise
        self.trainjobs.remember(updated)
        self.scheduling.confirm(metadata["uid"])
        self._tombstones.pop((worker, job_key(job)), None)
        self.metrics.placements.labels(worker).inc()
        first_seen = self._first_seen.get(metadata["uid"])
        if first_seen is not None:
            self.metrics.quota_wait.observe(time.monotonic() - first_seen)
        return await self._sync_placed(updated, worker)

    # ----- placed -----

    async def _sync_placed(self, job: JSON, worker_name: str) -> Result:
        key, uid = job_key(job), job["metadata"]["uid"]
        self._book(job, worker_name)
        worker = self.registry.get(worker_name)
        if job["spec"].get("suspend"):
            return await self._unplace(job, worker_name, c.REASON_SUSPENDED,
                                       "suspended: mirror removed and quota released",
                                       eviction=False)
        if worker is None:
            return await self._evict(job, worker_name, c.REASON_WORKER_LOST,
                                     f"worker {worker_name} is no longer registered")
        if not worker.usable():
            return await self._wait_for_worker(job, worker)
        if worker.spec.drain:
            return await self._unplace(job, worker_name, c.REASON_DRAINED,
                                       f"worker {worker_name} is being drained; requeued",
                                       eviction=True, counted=False)
        assert worker.mirrors is not None
        mirror = worker.mirrors.get(key)
        if mirror is None:
            tombstone = self._tombstones.get((worker_name, key))
            if tombstone is not None and self.kind.is_ours(
                tombstone, manager_uid=uid, origin=self.config.mirror.origin
            ):
                return await self._mirror_gone(job, worker, tombstone)
            return await self._create_mirror(job, worker)
        if not self.kind.is_ours(mirror, manager_uid=uid, origin=self.config.mirror.origin):
            return await self._reject(job, worker, c.REASON_NAME_CONFLICT,
                                      f"{key} on {worker_name} is not a mirror of this job")
        return await self._sync_status(job, worker, mirror)

    def _book(self, job: JSON, worker: str) -> None:
        uid = job["metadata"]["uid"]
        booking = self.ledger.get(uid)
        if booking is not None and booking.worker == worker:
            return
        self.ledger.book(Booking(uid, job_key(job), worker, self._booked_demand(job)))

    def _booked_demand(self, job: JSON) -> dict[str, Fraction]:
        """What a placed job holds: its demand annotation, but never less than what the
        job needs now, so an edited or broken annotation cannot book less than runs."""
        text = annotations_of(job).get(c.ANNOTATION_DEMAND, "")
        try:
            recorded = checked_vector_text(text, path=f"annotation {c.ANNOTATION_DEMAND}")
        except DemandError as error:
            log.warning("%s: %s; booking its demand as computed now", job_key(job), error,
                        extra={"job": job_key(job)})
            recorded = {}
        runtime = self._runtime(job)
        try:
            computed = self._demand(job, runtime) if runtime is not None else {}
        except DemandError:
            computed = {}
        return resources.maximum([recorded, computed])

    async def _wait_for_worker(self, job: JSON, worker: WorkerConnection) -> Result:
        timeout = self.config.workers.lost_timeout_seconds
        if worker.lost_since is None:
            return Result.after(self.config.workers.probe_interval_seconds)
        lost_for = time.time() - worker.lost_since
        if lost_for >= timeout:
            return await self._evict(
                job, worker.name, c.REASON_WORKER_LOST,
                f"worker {worker.name} lost for {int(lost_for)}s ({worker.message})")
        return Result.after(timeout - lost_for + 0.05)

    async def _ensure_namespace(self, worker: WorkerConnection, namespace: str) -> None:
        known = self._namespaces.setdefault(worker.name, set())
        if namespace in known or not self.config.workers.create_namespaces:
            return
        assert worker.client is not None
        try:
            await Resource(worker.client, NAMESPACES).create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        except ApiException as error:
            if error.status != 409:
                raise
        known.add(namespace)

    async def _create_mirror(self, job: JSON, worker: WorkerConnection) -> Result:
        assert worker.client is not None and worker.mirrors is not None
        metadata = job["metadata"]
        body = self.kind.build_mirror(job, origin=self.config.mirror.origin,
                                      local_queue=worker.spec.local_queue)
        remote = Resource(worker.client, self.kind.kind)
        await self._ensure_namespace(worker, metadata["namespace"])
        try:
            created = await remote.create(body, namespace=metadata["namespace"])
        except ApiException as error:
            if error.status == 409:
                existing = await remote.get(metadata["name"], namespace=metadata["namespace"])
                if existing is not None and self.kind.is_ours(
                    existing, manager_uid=metadata["uid"], origin=self.config.mirror.origin
                ):
                    worker.mirrors.remember(existing)
                    return await self._sync_status(job, worker, existing)
                return await self._reject(job, worker, c.REASON_NAME_CONFLICT,
                                          f"{job_key(job)} already exists on {worker.name} "
                                          "and was not created by this dispatcher")
            if error.status in _REJECTION_CODES:
                return await self._reject(job, worker, c.REASON_MIRROR_REJECTED,
                                          f"{worker.name} rejected the mirror: "
                                          f"{message_of(error)}")
            self.metrics.dispatch_errors.labels(worker.name, f"http-{error.status}").inc()
            raise
        worker.mirrors.remember(created)
        first_seen = self._first_seen.pop(metadata["uid"], None)
        if first_seen is not None:
            self.metrics.dispatch_latency.observe(time.monotonic() - first_seen)
        self.events.record(job, reason=c.REASON_PLACED,
                           message=f"mirror created on worker {worker.name}")
        return await self._sync_status(job, worker, created)

    async def _sync_status(self, job: JSON, worker: WorkerConnection, mirror: JSON) -> Result:
        news_seen = self._status_seen.pop(job_key(job), None)
        finished = self.kind.finished(mirror.get("status"))
        if finished is not None and self._retry_requested(job, finished):
            return await self._evict(job, worker.name, c.REASON_RETRYING_FAILURE,
                                     f"failed on worker {worker.name} with "
                                     f"{finished.get('reason')}, which the job retries")
        if finished is not None:
            return await self._finish(job, worker, mirror, finished)
        evicted = self.kind.evicted_remotely(mirror)
        if evicted is not None:
            return await self._evict(job, worker.name, c.REASON_MIRROR_EVICTED,
                                     f"evicted on worker {worker.name}: {evicted}")
        mirror_status = self.kind.remote_status(mirror)
        previous = condition(job.get("status"), c.CONDITION_DISPATCHED)
        if not mirror_status and previous is None:
            return Result.done()
        dispatched = st.dispatched_condition(job, placed=True, reason=c.REASON_PLACED,
                                             message=f"running on worker {worker.name}")
        await self._write_status(job, st.with_mirror(job, mirror_status, dispatched),
                                 news_seen=news_seen)
        return Result.done()

    def _retry_requested(self, job: JSON, finished: JSON) -> bool:
        """Whether a Failed mirror's reason is one the job opted in to retry elsewhere."""
        if finished.get("type") != CONDITION_FAILED:
            return False
        wanted = annotations_of(job).get(c.ANNOTATION_RETRY_ON_REASONS, "")
        return finished.get("reason") in {r.strip() for r in wanted.split(",") if r.strip()}

    async def _write_status(self, job: JSON, desired: JSON, *,
                            news_seen: float | None = None) -> JSON:
        """Patch the manager status to `desired` if it differs; `news_seen` is when the
        mirror change that led here was seen (for the status-sync latency)."""
        patch = st.status_patch(job, desired)
        if patch is None:
            return job
        metadata = job["metadata"]
        try:
            updated = await self._jobs.merge_patch(metadata["name"], {"status": patch},
                                                   namespace=metadata["namespace"],
                                                   subresource="status")
        except ApiException as error:
            if error.status == 404:
                return job
            raise
        self.trainjobs.remember(updated)
        if news_seen is not None:
            self.metrics.status_sync_latency.observe(time.monotonic() - news_seen)
        return updated

    def rebuild_ledger(self) -> int:
        """Book every placed job from the manager's annotations; before any placement."""
        booked = 0
        for job in self.trainjobs.store.values():
            worker = annotations_of(job).get(c.ANNOTATION_CLUSTER)
            if (worker and self.claimed(job)
                    and c.FINALIZER in (job["metadata"].get("finalizers") or [])):
                self._book(job, worker)
                booked += 1
        return booked
