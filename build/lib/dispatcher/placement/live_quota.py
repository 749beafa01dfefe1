"""What a worker's Kueue ClusterQueue can still admit, from its quota and its Workloads.

Pure arithmetic over Kueue's objects (`kueue.x-k8s.io/v1beta2`), following Kueue's own
model of a flat cohort:

- a ClusterQueue's nominal quota, borrowing limit and lending limit per resource are
  summed over its flavors (a resource with one flavor lacking a borrowing limit may
  borrow without limit; a flavor lacking a lending limit lends all of its quota);
- a Workload holds quota while its `QuotaReserved` condition is True and it has not
  finished: the `resourceUsage` of its admission's pod sets, in its admission's queue;
- without a cohort, a queue can admit its nominal quota minus what its Workloads hold;
- in a cohort, it can admit what it keeps for itself (nominal minus lending limit) and
  is not using, plus what the cohort's lendable pool has left, capped by its borrowing
  limit; the most it could ever hold (`potential`) is what it keeps plus the whole
  pool, capped by nominal plus borrowing limit.

Flavors are folded together per resource, so a job split across flavors may be offered
room that Kueue cannot give it in one flavor: the mirror then waits for admission on the
worker, where `placement.admissionTimeoutSeconds` moves it. Cohort objects (hierarchical
cohorts, a cohort's own quota) are not read: their extra room is never offered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dispatcher.api.kueue import JOB_UID_LABEL
from dispatcher.placement import resources
from dispatcher.placement.quantity import parse_quantity

Vector = dict[str, Fraction]


@dataclass(frozen=True)
class QueueQuota:
    """One ClusterQueue's quota, per resource summed over its flavors."""

    name: str
    cohort: str = ""
    nominal: Vector = field(default_factory=dict)
    borrowing_limit: Mapping[str, Fraction | None] = field(default_factory=dict)
    """Per resource; None (or absent) means no limit."""
    lendable: Vector = field(default_factory=dict)
    """Per resource, what the queue lends its cohort: its lending limit, else all of it."""
    active: bool = True
    inactive_message: str = ""

    def kept(self, resource: str) -> Fraction:
        """What the queue keeps for itself and never lends."""
        return max(Fraction(0), self.nominal.get(resource, Fraction(0))
                   - self.lendable.get(resource, Fraction(0)))


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


def parse_cluster_queue(obj: Mapping[str, Any]) -> QueueQuota:
    """The quota of a ClusterQueue object; QuantityError or KeyError when it is unreadable."""
    spec = obj.get("spec") or {}
    nominal: Vector = {}
    lendable: Vector = {}
    limits: dict[str, Fraction | None] = {}
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                name = res["name"]
                amount = parse_quantity(res.get("nominalQuota", 0))
                nominal[name] = nominal.get(name, Fraction(0)) + amount
                lending = res.get("lendingLimit")
                lendable[name] = lendable.get(name, Fraction(0)) + (
                    min(amount, parse_quantity(lending)) if lending is not None else amount)
                borrowing = res.get("borrowingLimit")
                previous = limits.get(name, Fraction(0))
                limits[name] = (None if borrowing is None or previous is None
                                else previous + parse_quantity(borrowing))
    active = _conditions(obj).get("Active") or {}
    is_active = active.get("status") == "True"
    message = "" if is_active else str(
        active.get("message") or active.get("reason") or "Kueue has not marked it Active")
    return QueueQuota(name=obj["metadata"]["name"], cohort=str(spec.get("cohortName") or ""),
                      nominal=nominal, borrowing_limit=limits, lendable=lendable,
                      active=is_active, inactive_message=message)


@dataclass(frozen=True)
class Reservation:
    """What one Workload holds now: its queue, its job's UID, the amounts."""

    cluster_queue: str
    job_uid: str
    usage: Vector


def reservation_of(workload: Mapping[str, Any]) -> Reservation | None:
    """The quota a Workload holds, None when it holds none (pending, evicted, finished)."""
    found = _conditions(workload)
    if (found.get("QuotaReserved") or {}).get("status") != "True":
        return None
    if (found.get("Finished") or {}).get("status") == "True":
        return None
    admission = (workload.get("status") or {}).get("admission") or {}
    usage: Vector = {}
    for assignment in admission.get("podSetAssignments") or []:
        for name, amount in (assignment.get("resourceUsage") or {}).items():
            usage[name] = usage.get(name, Fraction(0)) + parse_quantity(amount)
    labels = (workload.get("metadata") or {}).get("labels") or {}
    return Reservation(cluster_queue=str(admission.get("clusterQueue", "")),
                       job_uid=str(labels.get(JOB_UID_LABEL, "")), usage=usage)


def _members(queue: QueueQuota, queues: Mapping[str, QueueQuota]) -> list[QueueQuota]:
    return [q for q in queues.values() if q.cohort == queue.cohort]


def potential(queue: QueueQuota, queues: Mapping[str, QueueQuota]) -> Vector:
    """The most the queue could hold with nothing else running, per resource it covers."""
    if not queue.cohort:
        return dict(queue.nominal)
    members = _members(queue, queues)
    room: Vector = {}
    for name in queue.nominal:
        pool = sum((m.lendable.get(name, Fraction(0)) for m in members), Fraction(0))
        most = queue.kept(name) + pool
        limit = queue.borrowing_limit.get(name)
        room[name] = most if limit is None else min(most, queue.nominal[name] + limit)
    return room


def available(queue: QueueQuota, queues: Mapping[str, QueueQuota],
              usage: Mapping[str, Vector]) -> Vector:
    """What the queue can admit now, per resource it covers, never below zero.

    `usage` maps each ClusterQueue to what its Workloads hold (and, for `queue`, whatever
    the caller also counts as held there)."""
    own = usage.get(queue.name, {})
    if not queue.cohort:
        return {name: max(Fraction(0), amount)
                for name, amount in resources.remaining(queue.nominal, own).items()}
    members = _members(queue, queues)
    room: Vector = {}
    for name in queue.nominal:
        pool = sum((m.lendable.get(name, Fraction(0)) for m in members), Fraction(0))
        borrowed = sum((max(Fraction(0), usage.get(m.name, {}).get(name, Fraction(0))
                            - m.kept(name)) for m in members), Fraction(0))
        from_cohort = pool - borrowed
        used = own.get(name, Fraction(0))
        kept = queue.kept(name)
        limit = queue.borrowing_limit.get(name)
        if limit is not None:
            lent = queue.nominal[name] - kept
            from_cohort = min(from_cohort, lent - max(Fraction(0), used - kept) + limit)
        room[name] = max(Fraction(0), max(Fraction(0), kept - used) + from_cohort)
    return room
