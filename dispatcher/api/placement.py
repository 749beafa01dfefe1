"""The Placement resource (`dispatcher.trainjob.io/v1alpha1`): where a job runs, on record.

One Placement per manager job that has ever been placed, named by the job's UID, in the
dispatcher's own namespace, written by the dispatcher alone (users who may edit
TrainJobs get no rights on it). It is the truth the quota ledger is built from: the
worker the job is placed on (empty while it waits after an eviction), the demand booked
there, how many times it was evicted, and its requeue state: the time before which it
is not placed again (the eviction backoff) and the workers it is kept off until when
(Kueue keeps the same in a Workload's `requeueState`). The requeue state is written in
the same write that releases the placement, so neither a restart nor a failed write
after it forgets it. The job's `dispatcher.trainjob.io/cluster`,
`demand` and `evictions` annotations and its finalizer are only a view of it for
`kubectl`, rewritten from the record when they differ.

`PlacementRecord` is the typed view of one object; `placement_body` builds one.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dispatcher.api.constants import PREFIX
from dispatcher.kube.informer import job_key
from dispatcher.kube.resource import ResourceKind
from dispatcher.placement.quantity import format_quantity
from dispatcher.placement.validation import DemandError, checked_quantities

PLACEMENTS = ResourceKind(PREFIX, "v1alpha1", "placements", namespaced=True)
API_VERSION = f"{PREFIX}/v1alpha1"
JSON = dict[str, Any]


@dataclass(frozen=True)
class PlacementRecord:
    uid: str
    """The manager job's UID (the object's name)."""
    key: str
    """The manager job's namespace/name."""
    worker: str
    """The worker the job is placed on; empty while it is not placed."""
    demand: dict[str, Fraction] = field(default_factory=dict)
    evictions: int = 0
    priority: int = 0
    """The job's priority when it was placed: what preemption compares."""
    not_before: float = 0.0
    """Wall-clock seconds before which the job is not placed again (0: no backoff)."""
    excluded: dict[str, float] = field(default_factory=dict)
    """Worker -> wall-clock seconds until which the job is not offered to it."""
    taken_off: tuple[str, str] = ("", "")
    """(reason, message) of the job's last take-off from a worker, while it is not placed."""
    resource_version: str = ""
    problem: str = ""
    """Why the object could not be read in full (only an admin can write one)."""

    @property
    def placed(self) -> bool:
        return bool(self.worker)

    def excluded_at(self, now: float) -> frozenset[str]:
        """The workers the job is kept off at wall-clock time `now`."""
        kept_off = [worker for worker, until in self.excluded.items() if until > now]
        return frozenset(kept_off) if kept_off else NO_EXCLUSIONS


NO_EXCLUSIONS: frozenset[str] = frozenset()
"""The one empty set of excluded workers: most queued jobs are kept off none, and share it."""


def placements_of(records: Iterable[PlacementRecord]) -> dict[str, str]:
    """Job UID -> worker, for the records that place their job: where jobs run."""
    return {record.uid: record.worker for record in records if record.placed}


def timestamp_text(seconds: float) -> str:
    """RFC 3339 with microseconds (a backoff may be shorter than a second)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def _timestamp(text: Any, *, path: str) -> float:
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"{path}: {text!r} is not an RFC 3339 time") from None


def _requeue_of(spec: JSON) -> tuple[float, dict[str, float], tuple[str, str]]:
    """(notBefore, excluded, (reason, message)) of `spec.requeue`; a ValueError names what
    is malformed."""
    requeue = spec.get("requeue") or {}
    if not isinstance(requeue, dict):
        raise ValueError(f"spec.requeue: {requeue!r} is not an object")
    not_before = (_timestamp(requeue["notBefore"], path="spec.requeue.notBefore")
                  if requeue.get("notBefore") else 0.0)
    excluded: dict[str, float] = {}
    for entry in requeue.get("excludedWorkers") or []:
        if not isinstance(entry, dict) or not entry.get("worker"):
            raise ValueError(f"spec.requeue.excludedWorkers: {entry!r} names no worker")
        excluded[str(entry["worker"])] = _timestamp(
            entry.get("until"), path="spec.requeue.excludedWorkers.until")
    return not_before, excluded, (str(requeue.get("reason") or ""),
                                  str(requeue.get("message") or ""))


def record_of(obj: JSON) -> PlacementRecord:
    """The record an object holds; a malformed demand or count is kept as `problem`."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    job = spec.get("job") or {}
    problem = ""
    try:
        demand = checked_quantities(spec.get("demand") or {}, path="spec.demand")
    except DemandError as error:
        demand, problem = {}, str(error)
    evictions = spec.get("evictions") or 0
    if not isinstance(evictions, int) or evictions < 0:
        evictions, problem = 0, f"spec.evictions: {evictions!r} is not a count"
    priority = spec.get("priority") or 0
    if not isinstance(priority, int):
        priority, problem = 0, f"spec.priority: {priority!r} is not an integer"
    try:
        not_before, excluded, taken_off = _requeue_of(spec)
    except ValueError as error:
        not_before, excluded, taken_off, problem = 0.0, {}, ("", ""), str(error)
    return PlacementRecord(
        uid=str(job.get("uid") or metadata.get("name", "")),
        key=job_key(str(job.get("namespace", "")), str(job.get("name", ""))),
        worker=str(spec.get("worker") or ""), demand=demand, evictions=evictions,
        priority=priority,
        not_before=not_before, excluded=excluded, taken_off=taken_off,
        resource_version=str(metadata.get("resourceVersion", "")), problem=problem)


def placement_spec(record: PlacementRecord) -> JSON:
    namespace, _, name = record.key.partition("/")
    return {
        "job": {"namespace": namespace, "name": name, "uid": record.uid},
        "worker": record.worker,
        "demand": {name: format_quantity(amount)
                   for name, amount in sorted(record.demand.items()) if amount},
        "evictions": record.evictions,
        "priority": record.priority,
        "requeue": {
            "notBefore": timestamp_text(record.not_before) if record.not_before else None,
            "reason": record.taken_off[0] or None,
            "message": record.taken_off[1] or None,
            "excludedWorkers": [{"worker": worker, "until": timestamp_text(until)}
                                for worker, until in sorted(record.excluded.items())],
        },
    }


def placement_body(record: PlacementRecord, *, namespace: str) -> JSON:
    spec = placement_spec(record)
    for field_name in ("notBefore", "reason", "message"):
        if spec["requeue"][field_name] is None:
            del spec["requeue"][field_name]  # None only clears it in a merge patch
    return {"apiVersion": API_VERSION, "kind": "Placement",
            "metadata": {"name": record.uid, "namespace": namespace}, "spec": spec}
