"""The writes to the manager job: placement, status, finalizer, and the events about it.

Each write is one merge patch carrying the resourceVersion it was decided on where
order matters (placement, finalizer), so a decision taken on a stale copy fails with a
409 and is decided again; the written object goes into the cache at once
(`Informer.remember`). A 404 means the job is gone: nothing left to do.
"""

from __future__ import annotations

import logging
from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api.conditions import condition
from dispatcher.clock import Clock
from dispatcher.controllers import status as st
from dispatcher.kinds import JobKind
from dispatcher.kube.informer import Informer
from dispatcher.observability.events import EventRecorder
from dispatcher.observability.metrics import Metrics
from dispatcher.placement import resources

log = logging.getLogger(__name__)
JSON = dict[str, Any]


class Conflict(Exception):
    """The job changed since the decision; decide again (with the key's backoff)."""


class ManagerWriter:
    def __init__(self, *, kind: JobKind, trainjobs: Informer, events: EventRecorder,
                 metrics: Metrics, clock: Clock) -> None:
        self.kind = kind
        self.cache = trainjobs
        self.events = events
        self.metrics = metrics
        self.clock = clock
        self._jobs = trainjobs.resource

    def now(self) -> str:
        return st.rfc3339(self.clock.time())

    async def _patch(self, job: JSON, patch: JSON, *, subresource: str = "") -> JSON | None:
        """The patched job (remembered), None when it is gone; Conflict on a 409."""
        metadata = job["metadata"]
        try:
            updated = await self._jobs.merge_patch(metadata["name"], patch,
                                                   namespace=metadata["namespace"],
                                                   subresource=subresource)
        except ApiException as error:
            if error.status == 404:
                return None
            if error.status == 409:
                raise Conflict(f"{metadata['namespace']}/{metadata['name']} changed") from None
            raise
        self.cache.remember(updated)
        return updated

    async def write_status(self, job: JSON, desired: JSON, *,
                           news_seen: float | None = None) -> JSON:
        """Patch the status to `desired` if it differs; `news_seen` is when the mirror
        change that led here was seen (for the status-sync latency)."""
        patch = st.status_patch(self.kind, job, desired)
        if patch is None:
            return job
        updated = await self._patch(job, {"status": patch}, subresource="status")
        if updated is None:
            return job
        if news_seen is not None:
            self.metrics.status_sync_latency.observe(self.clock.monotonic() - news_seen)
        return updated

    async def set_waiting(self, job: JSON, reason: str, message: str, *,
                          warn: bool = False, extra: list[JSON] | None = None) -> JSON:
        """Dispatched=False with `reason`; with `warn`, a Warning event when it is news."""
        previous = condition(job.get("status"), c.CONDITION_DISPATCHED) or {}
        now = self.now()
        dispatched = st.dispatched_condition(job, placed=False, reason=reason,
                                             message=message, now=now)
        updated = await self.write_status(
            job, st.without_mirror(self.kind, job, dispatched, now=now, extra=extra))
        if warn and (previous.get("reason"), previous.get("message")) != (
                reason, dispatched["message"]):
            self.events.record(job, reason=reason, message=message, warning=True)
        return updated

    async def set_placed(self, job: JSON, mirror: JSON, *, reason: str, message: str,
                         news_seen: float | None = None) -> JSON:
        dispatched = st.dispatched_condition(job, placed=True, reason=reason, message=message,
                                             now=self.now())
        desired = st.with_mirror(self.kind, self.kind.remote_status(mirror), dispatched)
        return await self.write_status(job, desired, news_seen=news_seen)

    async def set_held(self, job: JSON, *, reason: str, message: str) -> JSON:
        """Dispatched=True with `reason`; the status last copied from the mirror is kept."""
        dispatched = st.dispatched_condition(job, placed=True, reason=reason, message=message,
                                             now=self.now())
        desired = st.with_mirror(self.kind, job.get("status") or {}, dispatched)
        return await self.write_status(job, desired)

    async def record_placement(self, job: JSON, worker: str,
                               demand: dict[str, Fraction]) -> JSON | None:
        """Annotation and finalizer in one write, before anything is created remotely."""
        metadata = job["metadata"]
        finalizers = list(dict.fromkeys([*(metadata.get("finalizers") or []), c.FINALIZER]))
        return await self._patch(job, {"metadata": {
            "resourceVersion": metadata["resourceVersion"], "finalizers": finalizers,
            "annotations": {c.ANNOTATION_CLUSTER: worker,
                            c.ANNOTATION_DEMAND: resources.format_vector(demand)},
        }})

    async def clear_placement(self, job: JSON, *, evictions: int | None = None) -> JSON | None:
        metadata = job["metadata"]
        annotations: dict[str, str | None] = {c.ANNOTATION_CLUSTER: None,
                                              c.ANNOTATION_DEMAND: None}
        if evictions is not None:
            annotations[c.ANNOTATION_EVICTIONS] = str(evictions)
        return await self._patch(job, {"metadata": {
            "resourceVersion": metadata["resourceVersion"],
            "finalizers": [f for f in metadata.get("finalizers") or [] if f != c.FINALIZER],
            "annotations": annotations,
        }})

    async def drop_finalizer(self, job: JSON) -> None:
        metadata = job["metadata"]
        finalizers = metadata.get("finalizers") or []
        if c.FINALIZER not in finalizers:
            return
        await self._patch(job, {"metadata": {
            "resourceVersion": metadata["resourceVersion"],
            "finalizers": [f for f in finalizers if f != c.FINALIZER]}})
