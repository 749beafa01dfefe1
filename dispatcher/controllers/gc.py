"""Garbage collection of orphan mirrors on the workers.

A mirror (a worker object carrying this dispatcher's origin label) is an orphan when its
manager TrainJob is gone, has another UID (deleted and re-created), is placed on another
worker or on none, or has finished while finished mirrors are not kept. Candidates come
from the manager's cache; each is confirmed against the API server before it is deleted,
with the mirror's UID as a precondition, so a mirror created a moment ago is never lost.
The collector runs every `gc.intervalSeconds` and, before anything new is placed on it,
on every worker that (re)connects.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.controllers.workers import WorkerConnection, WorkerRegistry
from dispatcher.kinds import JobKind
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import Resource
from dispatcher.observability.metrics import Metrics

log = logging.getLogger(__name__)
JSON = dict[str, Any]


class GarbageCollector:
    def __init__(self, *, manager: ClusterClient, trainjobs: Informer, registry: WorkerRegistry,
                 kind: JobKind, origin: str, keep_finished: bool, interval: float,
                 metrics: Metrics) -> None:
        self._jobs = Resource(manager, kind.kind)
        self._cache = trainjobs
        self._registry = registry
        self._kind = kind
        self._origin = origin
        self._keep_finished = keep_finished
        self._interval = interval
        self._metrics = metrics

    def _orphan(self, mirror: JSON, job: JSON | None, worker: str) -> str | None:
        """Why `mirror` on `worker` is an orphan, or None when its manager job wants it."""
        if job is None:
            return "its manager TrainJob is gone"
        manager_uid = job["metadata"]["uid"]
        if not self._kind.is_ours(mirror, manager_uid=manager_uid, origin=self._origin):
            return "its manager TrainJob was re-created"
        annotations = job["metadata"].get("annotations") or {}
        finalizers = job["metadata"].get("finalizers") or []
        if annotations.get(c.ANNOTATION_CLUSTER) != worker or c.FINALIZER not in finalizers:
            if self._keep_finished and self._kind.finished(job.get("status")):
                return None
            return "its manager TrainJob is not placed on this worker"
        return None

    async def collect(self, worker: WorkerConnection) -> int:
        """Delete the orphan mirrors on one worker; returns how many were deleted."""
        if worker.client is None or worker.mirrors is None or not worker.mirrors.synced.is_set():
            return 0
        remote = Resource(worker.client, self._kind.kind)
        deleted = 0
        for key, mirror in list(worker.mirrors.store.items()):
            if self._orphan(mirror, self._cache.get(key), worker.name) is None:
                continue
            namespace, name = mirror["metadata"]["namespace"], mirror["metadata"]["name"]
            job = await self._jobs.get(name, namespace=namespace)
            why = self._orphan(mirror, job, worker.name)
            if why is None:
                continue
            try:
                gone = await remote.delete(name, namespace=namespace,
                                           uid=mirror["metadata"]["uid"])
            except ApiException as error:
                if error.status == 409:
                    continue
                raise
            worker.mirrors.forget(key)
            if gone:
                deleted += 1
                self._metrics.garbage_collected.labels(worker.name).inc()
                log.info("deleted orphan mirror %s on %s: %s", key, worker.name, why,
                         extra={"job": key, "worker": worker.name})
        return deleted

    async def collect_quietly(self, worker: WorkerConnection) -> None:
        """`collect`, with a failure logged (the next periodic run tries again)."""
        if not worker.usable():
            return
        try:
            await self.collect(worker)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("garbage collection on %s failed: %s", worker.name, error)

    async def collect_all(self) -> None:
        for worker in list(self._registry.workers.values()):
            await self.collect_quietly(worker)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.collect_all()
