"""How a claimed TrainJob leaves its worker: finished, deleted, evicted, rejected.

A mixin of `JobsController` (`controllers/jobs.py`), kept apart so each module stays
readable: deleting the mirror (only ours, by UID), clearing the placement and the
finalizer in one write, evictions with requeue backoff and the `maxEvictions` limit,
rejections that exclude a worker for a while, the final status of a finished job, and
the finalizer of a deleted one.
"""

from __future__ import annotations

import logging
import time
from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api.trainer import CONDITION_FAILED
from dispatcher.config import DispatcherConfig
from dispatcher.controllers import status as st
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.controllers.trainjob_kind import JobKind
from dispatcher.controllers.workers import WorkerConnection, WorkerRegistry
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import Resource
from dispatcher.kube.workqueue import Result
from dispatcher.observability.events import EventRecorder
from dispatcher.observability.metrics import Metrics
from dispatcher.placement.ledger import Ledger

log = logging.getLogger(__name__)
JSON = dict[str, Any]


def job_key(obj: JSON) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def annotations_of(job: JSON) -> dict[str, str]:
    return job["metadata"].get("annotations") or {}


class LeavingWorker:
    """The exits of a job's life; the state is `JobsController`'s."""

    config: DispatcherConfig
    registry: WorkerRegistry
    kind: JobKind
    ledger: Ledger
    scheduling: SchedulingLoop
    trainjobs: Informer
    events: EventRecorder
    metrics: Metrics
    _jobs: Resource
    _tombstones: dict[tuple[str, str], JSON]
    _deleted_mirrors: set[str]
    _demands: dict[str, tuple[int, dict[str, Fraction]]]
    _excluded: dict[str, dict[str, float]]
    _not_before: dict[str, float]
    _first_seen: dict[str, float]
    _status_seen: dict[str, float]

    async def _write_status(self, job: JSON, desired: JSON, *,
                            news_seen: float | None = None) -> JSON:
        raise NotImplementedError

    async def _delete_mirror(self, worker: WorkerConnection | None, job: JSON) -> bool:
        """Delete our mirror of `job` if the worker is reachable; True when it is gone."""
        key = job_key(job)
        if worker is None or not worker.usable():
            return False
        assert worker.client is not None and worker.mirrors is not None
        mirror = worker.mirrors.get(key)
        if mirror is None:
            return True
        if not self.kind.is_ours(mirror, manager_uid=job["metadata"]["uid"],
                                 origin=self.config.mirror.origin):
            return True
        metadata = mirror["metadata"]
        self._deleted_mirrors.add(metadata["uid"])
        try:
            await Resource(worker.client, self.kind.kind).delete(
                metadata["name"], namespace=metadata["namespace"], uid=metadata["uid"])
        except ApiException as error:
            self._deleted_mirrors.discard(metadata["uid"])
            if error.status != 409:
                raise
        worker.mirrors.forget(key)
        self._tombstones.pop((worker.name, key), None)
        return True

    async def _clear_placement(self, job: JSON, *, evictions: int | None = None) -> JSON:
        metadata = job["metadata"]
        annotations: dict[str, str | None] = {c.ANNOTATION_CLUSTER: None,
                                              c.ANNOTATION_DEMAND: None}
        if evictions is not None:
            annotations[c.ANNOTATION_EVICTIONS] = str(evictions)
        patch = {"metadata": {
            "resourceVersion": metadata["resourceVersion"],
            "finalizers": [f for f in metadata.get("finalizers") or [] if f != c.FINALIZER],
            "annotations": annotations,
        }}
        updated = await self._jobs.merge_patch(metadata["name"], patch,
                                               namespace=metadata["namespace"])
        self.trainjobs.remember(updated)
        self.ledger.release(metadata["uid"])
        self.scheduling.trigger()
        return updated

    async def _unplace(self, job: JSON, worker_name: str, reason: str, message: str, *,
                       eviction: bool, counted: bool = True) -> Result:
        """Take the job off its worker; an eviction requeues it (`counted` toward
        `mirror.maxEvictions` unless it is maintenance, like a drain)."""
        worker = self.registry.get(worker_name)
        deleted = await self._delete_mirror(worker, job)
        if not deleted and worker is not None and worker.lost_since is None:
            return Result.after(self.config.workers.probe_interval_seconds)
        evictions = int(annotations_of(job).get(c.ANNOTATION_EVICTIONS, "0") or 0)
        evictions += 1 if eviction and counted else 0
        try:
            updated = await self._clear_placement(
                job, evictions=evictions if eviction and counted else None)
        except ApiException as error:
            if error.status == 409:
                return Result.after(0.05)
            raise
        self._tombstones.pop((worker_name, job_key(job)), None)
        dispatched = st.dispatched_condition(updated, placed=False, reason=reason,
                                             message=message)
        extra: list[JSON] = []
        if eviction and evictions >= self.config.mirror.max_evictions:
            extra.append({"type": CONDITION_FAILED, "status": "True",
                          "reason": c.REASON_TOO_MANY_EVICTIONS,
                          "message": f"evicted {evictions} times; last: {message}",
                          "lastTransitionTime": st.now_rfc3339()})
        await self._write_status(updated, st.without_mirror(updated, dispatched, extra=extra))
        if not eviction:
            return Result.done()
        self.metrics.evictions.labels(worker_name, reason).inc()
        self.metrics.requeues.labels(reason).inc()
        self.events.record(updated, reason=c.REASON_EVICTED, message=message, warning=True)
        log.warning("evicted %s from %s: %s", job_key(job), worker_name, message,
                    extra={"job": job_key(job), "worker": worker_name})
        delay = (self.config.mirror.requeue_backoff_seconds * 2 ** max(evictions - 1, 0)
                 if counted else 0.0)
        self._not_before[job["metadata"]["uid"]] = time.monotonic() + delay
        return Result.after(delay)

    async def _evict(self, job: JSON, worker_name: str, reason: str, message: str) -> Result:
        return await self._unplace(job, worker_name, reason,
                                   f"{message}; requeued", eviction=True)

    async def _reject(self, job: JSON, worker: WorkerConnection, reason: str,
                      message: str) -> Result:
        """The worker refused the mirror: try the others for a while, not this one."""
        uid = job["metadata"]["uid"]
        until = time.monotonic() + self.config.placement.rejection_backoff_seconds
        self._excluded.setdefault(uid, {})[worker.name] = until
        self.metrics.dispatch_errors.labels(worker.name, reason).inc()
        self.events.record(job, reason=reason, message=message, warning=True)
        log.warning("%s: %s", job_key(job), message, extra={"job": job_key(job),
                                                            "worker": worker.name})
        try:
            updated = await self._clear_placement(job)
        except ApiException as error:
            if error.status == 409:
                return Result.after(0.05)
            raise
        dispatched = st.dispatched_condition(updated, placed=False, reason=reason,
                                             message=message)
        await self._write_status(updated, st.without_mirror(updated, dispatched))
        return Result.after(0.01)

    async def _mirror_gone(self, job: JSON, worker: WorkerConnection, last: JSON) -> Result:
        """Our mirror disappeared: finished before it went, or deleted under the job."""
        finished = self.kind.finished(last.get("status"))
        if finished is not None:
            return await self._finish(job, worker, last, finished)
        return await self._evict(job, worker.name, c.REASON_MIRROR_GONE,
                                 f"the mirror on worker {worker.name} was deleted")

    async def _finish(self, job: JSON, worker: WorkerConnection, mirror: JSON,
                      finished: JSON) -> Result:
        """Final status sync, then the mirror deleted (unless kept) and quota released."""
        dispatched = st.dispatched_condition(
            job, placed=True, reason=c.REASON_FINISHED,
            message=f"{finished.get('type')} on worker {worker.name}")
        updated = await self._write_status(
            job, st.with_mirror(job, self.kind.remote_status(mirror), dispatched))
        self.events.record(updated, reason=c.REASON_FINISHED,
                           message=f"{finished.get('type')} on worker {worker.name}: "
                                   f"{finished.get('reason', '')}",
                           warning=finished.get("type") == CONDITION_FAILED)
        return await self._on_finished_manager(updated, worker.name)

    async def _on_finished_manager(self, job: JSON, worker_name: str | None) -> Result:
        self.scheduling.withdraw(job["metadata"]["uid"])
        if worker_name is None:
            return Result.done()
        if not self.config.mirror.keep_finished:
            worker = self.registry.get(worker_name)
            gone = await self._delete_mirror(worker, job)
            if not gone and not self._worker_given_up(worker):
                return Result.after(self.config.workers.probe_interval_seconds)
        return await self._drop_finalizer(job)

    async def _on_deleted(self, job: JSON, worker_name: str | None) -> Result:
        self.scheduling.withdraw(job["metadata"]["uid"])
        if worker_name is None:
            return Result.done()
        worker = self.registry.get(worker_name)
        gone = await self._delete_mirror(worker, job)
        if not gone and not self._worker_given_up(worker):
            return Result.after(self.config.workers.probe_interval_seconds)
        return await self._drop_finalizer(job)

    def _worker_given_up(self, worker: WorkerConnection | None) -> bool:
        """No worker, or lost for longer than the timeout: the GC cleans up on return."""
        if worker is None:
            return True
        return worker.lost_since is not None and (
            time.time() - worker.lost_since >= self.config.workers.lost_timeout_seconds)

    async def _drop_finalizer(self, job: JSON) -> Result:
        metadata = job["metadata"]
        self.ledger.release(metadata["uid"])
        self.scheduling.trigger()
        finalizers = metadata.get("finalizers") or []
        if c.FINALIZER not in finalizers:
            return Result.done()
        patch = {"metadata": {"resourceVersion": metadata["resourceVersion"],
                              "finalizers": [f for f in finalizers if f != c.FINALIZER]}}
        try:
            updated = await self._jobs.merge_patch(metadata["name"], patch,
                                                   namespace=metadata["namespace"])
        except ApiException as error:
            if error.status == 404:
                return Result.done()
            if error.status == 409:
                return Result.after(0.05)
            raise
        self.trainjobs.remember(updated)
        self._forget(updated)
        return Result.done()

    def _forget(self, job: JSON) -> None:
        uid = job["metadata"]["uid"]
        self._demands.pop(uid, None)
        self._excluded.pop(uid, None)
        self._not_before.pop(uid, None)
        self._first_seen.pop(uid, None)
        self._status_seen.pop(job_key(job), None)

