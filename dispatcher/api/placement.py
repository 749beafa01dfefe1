"""The Placement resource (`dispatcher.trainjob.io/v1alpha1`): where a job runs, on record.

One Placement per manager job that has ever been placed, named by the job's UID, in the
dispatcher's own namespace, written by the dispatcher alone (users who may edit
TrainJobs get no rights on it). It is the truth the quota ledger is built from: the
worker the job is placed on (empty while it waits after an eviction), the demand booked
there, and how many times it was evicted. The job's `dispatcher.trainjob.io/cluster`,
`demand` and `evictions` annotations and its finalizer are only a view of it for
`kubectl`, rewritten from the record when they differ.

`PlacementRecord` is the typed view of one object; `placement_body` builds one.
"""

from __future__ import annotations

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
    resource_version: str = ""
    problem: str = ""
    """Why the object could not be read in full (only an admin can write one)."""

    @property
    def placed(self) -> bool:
        return bool(self.worker)


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
    return PlacementRecord(
        uid=str(job.get("uid") or metadata.get("name", "")),
        key=job_key(str(job.get("namespace", "")), str(job.get("name", ""))),
        worker=str(spec.get("worker") or ""), demand=demand, evictions=evictions,
        resource_version=str(metadata.get("resourceVersion", "")), problem=problem)


def placement_spec(record: PlacementRecord) -> JSON:
    namespace, _, name = record.key.partition("/")
    return {
        "job": {"namespace": namespace, "name": name, "uid": record.uid},
        "worker": record.worker,
        "demand": {name: format_quantity(amount)
                   for name, amount in sorted(record.demand.items()) if amount},
        "evictions": record.evictions,
    }


def placement_body(record: PlacementRecord, *, namespace: str) -> JSON:
    return {"apiVersion": API_VERSION, "kind": "Placement",
            "metadata": {"name": record.uid, "namespace": namespace},
            "spec": placement_spec(record)}
