"""The writes on the manager: the placement record, the job's view of it, its status
and finalizer (the events about it are the controller's, through `EventRecorder`).

The record (a Placement object in the dispatcher's namespace) is written first, the
job's view of it (annotations, finalizer) after. Each write carries the resourceVersion
it was decided on where order matters (record, view, finalizer), so a decision taken on
a stale copy fails with a 409 and is decided again; the written object goes into the
cache at once (`Informer.remember`). A 404 on the job means it is gone: nothing left to
do there.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS, PlacementRecord, placement_body, placement_spec
from dispatcher.clock import Clock
from dispatcher.controllers import status as st
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.jobs.view import desired_view
from dispatcher.kinds import JobKind
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import Resource
from dispatcher.observability.metrics import Metrics

log = logging.getLogger(__name__)
JSON = dict[str, Any]


class Conflict(Exception):
    """The job changed since the decision; decide again (with the key's backoff)."""


class RecordNamespaceMissing(RuntimeError):
    """Placement records live in the dispatcher's namespace, which must exist."""


class ManagerWriter:
    def __init__(self, *, kind: JobKind, trainjobs: Informer, records: PlacementRecords,
                 metrics: Metrics, clock: Clock) -> None:
        self.kind = kind
        self.cache = trainjobs
        self.records = records
        self._placements = Resource(trainjobs.resource.client, PLACEMENTS)
        self._namespace = records.informer.namespace or ""
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
                          extra: list[JSON] | None = None) -> JSON:
        """Dispatched=False with `reason` (and `extra` conditions)."""
        now = self.now()
        dispatched = st.dispatched_condition(job, placed=False, reason=reason,
                                             message=message, now=now)
        return await self.write_status(
            job, st.without_mirror(self.kind, job, dispatched, now=now, extra=extra))

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

    async def write_record(self, record: PlacementRecord, *,
                           previous: PlacementRecord | None) -> PlacementRecord:
        """Create the job's record, or replace the spec of `previous` (as decided on)."""
        try:
            if previous is None:
                written = await self._placements.create(
                    placement_body(record, namespace=self._namespace),
                    namespace=self._namespace)
            else:
                written = await self._placements.merge_patch(record.uid, {
                    "metadata": {"resourceVersion": previous.resource_version},
                    "spec": placement_spec(record)}, namespace=self._namespace)
        except ApiException as error:
            if error.status == 404 and previous is None:
                raise RecordNamespaceMissing(
                    f"cannot record the placement of {record.key}: the dispatcher's "
                    f"namespace {self._namespace!r} does not exist") from None
            if error.status in (404, 409):
                raise Conflict(f"the placement record of {record.key} changed") from None
            raise
        self.records.remember(written)
        return self.records.of_uid(record.uid) or record

    async def delete_record(self, record: PlacementRecord) -> None:
        try:
            await self._placements.delete(
                record.uid, namespace=self._namespace,
                resource_version=record.resource_version)
        except ApiException as error:
            if error.status == 409:
                raise Conflict(f"the placement record of {record.key} changed") from None
            raise
        self.records.forget(record)

    async def write_view(self, job: JSON, record: PlacementRecord | None) -> JSON | None:
        """The job's annotations and finalizer as `record` says (one write)."""
        metadata = job["metadata"]
        view = desired_view(record)
        finalizers = [f for f in metadata.get("finalizers") or [] if f != c.FINALIZER]
        if view.finalizer:
            finalizers.append(c.FINALIZER)
        return await self._patch(job, {"metadata": {
            "resourceVersion": metadata["resourceVersion"], "finalizers": finalizers,
            "annotations": view.annotations,
        }})

    async def drop_finalizer(self, job: JSON) -> JSON | None:
        """The job without our finalizer (as written), None when it is gone."""
        metadata = job["metadata"]
        finalizers = metadata.get("finalizers") or []
        if c.FINALIZER not in finalizers:
            return job
        return await self._patch(job, {"metadata": {
            "resourceVersion": metadata["resourceVersion"],
            "finalizers": [f for f in finalizers if f != c.FINALIZER]}})
