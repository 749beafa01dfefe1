"""Garbage collection of orphan mirrors on the workers.

Which mirrors (worker objects carrying this dispatcher's origin label) are orphans is
`decide.orphan_reason`, beside the job's other rules. Candidates come from the
caches; each is confirmed against the API server (the job and its record) before it is
deleted, with the mirror's UID as a precondition, so a mirror created a moment ago is
never lost: its record was written before it.
The collector runs every `gc.intervalSeconds` (of the injected `Clock`) and, before
anything new is placed on it, on every worker that (re)connects. A worker is offered to
the scheduler (`WorkerConnection.collected`) after the first collection since it became
active that succeeded, whichever run it was: a failed one on connect is retried
(`collect_until_open`, with backoff) and any periodic one may open it too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS, PlacementRecord, record_of
from dispatcher.claim import Claim
from dispatcher.clock import Clock
from dispatcher.config import MirrorConfig
from dispatcher.controllers.jobs.decide import orphan_reason
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.workers import WorkerConnection, WorkerRegistry
from dispatcher.kinds import JobKind
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import Resource
from dispatcher.observability.metrics import Metrics

log = logging.getLogger(__name__)
JSON = dict[str, Any]


class GarbageCollector:
    def __init__(self, *, manager: ClusterClient, trainjobs: Informer,
                 records: PlacementRecords, registry: WorkerRegistry, claim: Claim,
                 kind: JobKind, mirror_config: MirrorConfig, interval: float,
                 metrics: Metrics, clock: Clock,
                 on_opened: Callable[[WorkerConnection], None] = lambda worker: None
                 ) -> None:
        self._jobs = Resource(manager, kind.kind)
        self._placements = Resource(manager, PLACEMENTS)
        self._cache = trainjobs
        self._records = records
        self._registry = registry
        self._claim = claim
        self._kind = kind
        self._mirror_config = mirror_config
        self._interval = interval
        self._metrics = metrics
        self._clock = clock
        self._on_opened = on_opened

    def _orphan(self, mirror: JSON, job: JSON | None, record: PlacementRecord | None,
                worker: str) -> str | None:
        return orphan_reason(mirror, job, record, worker=worker, claim=self._claim,
                             kind=self._kind, config=self._mirror_config,
                             wall=self._clock.time())

    async def collect(self, worker: WorkerConnection) -> int:
        """Delete the orphan mirrors on one worker; returns how many were deleted."""
        if worker.client is None or worker.mirrors is None or not worker.mirrors.synced.is_set():
            return 0
        remote = Resource(worker.client, self._kind.kind)
        deleted = 0
        for key, mirror in list(worker.mirrors.store.items()):
            uid = (mirror["metadata"].get("annotations") or {}).get(c.ANNOTATION_MANAGER_UID, "")
            if self._orphan(mirror, self._cache.get(key), self._records.of_uid(uid),
                            worker.name) is None:
                continue
            namespace, name = mirror["metadata"]["namespace"], mirror["metadata"]["name"]
            job = await self._jobs.get(name, namespace=namespace)
            found = (await self._placements.get(uid, namespace=self._records.informer.namespace)
                     if uid else None)
            why = self._orphan(mirror, job, record_of(found) if found else None, worker.name)
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

    async def collect_quietly(self, worker: WorkerConnection) -> bool:
        """`collect`, with a failure logged (the next run tries again); a success opens a
        worker not yet collected since it became active. Whether it succeeded."""
        if not worker.usable():
            return False
        try:
            await self.collect(worker)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("collecting stale mirrors on %s failed: %s", worker.name, error,
                        extra={"worker": worker.name})
            return False
        if worker.usable() and not worker.collected:
            worker.collected = True
            self._on_opened(worker)
        return True

    async def collect_until_open(self, worker: WorkerConnection, *,
                                 first_retry: float = 1.0, longest: float = 30.0) -> None:
        """Collect on a worker that just became active until one run succeeds (it is then
        open), retrying with a doubling delay while it stays usable and unopened."""
        delay = first_retry
        while worker.usable() and not worker.collected:
            if await self.collect_quietly(worker):
                return
            await self._clock.sleep(delay)
            delay = min(delay * 2, longest)

    async def collect_all(self) -> None:
        for worker in list(self._registry.workers.values()):
            await self.collect_quietly(worker)

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._interval)
            await self.collect_all()
