"""Whether a job may be placed, or stay placed, by what Kueue says of its Workload.

Pure: `gate_of(job, workload, checks)` reads the job's Workload on the manager (or its
absence) and gives a `Gate`. In this mode Kueue keeps the manager job suspended until
every check of its Workload is `Ready`, so `suspend` says nothing about the user's
wish: the Workload does. A job is placed only while its Workload has quota reserved and
our check is `Pending` (`admits`); a placed job keeps its worker while the Workload
still has its quota, is not evicted and our check is `Pending` or `Ready` (`holds`);
otherwise (Kueue evicted, preempted or deactivated the Workload, or our check went
`Retry` or `Rejected`) its mirror is withdrawn. Kueue marks a Workload `Evicted` (and
resets its checks to `Pending`) before it releases the quota, and releases it only once
the manager job no longer runs: the withdrawal, which clears the job's `jobsStatus`, is
what lets it. The reason and message say why, for the job's
Dispatched condition.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api import kueue as k
from dispatcher.api.conditions import condition, condition_true

JSON = dict[str, Any]


@dataclass(frozen=True)
class Gate:
    """What the job's Workload allows now."""

    admits: bool
    """The job may be placed now."""
    holds: bool
    """A placed job keeps its worker."""
    reason: str = ""
    message: str = ""


def check_of(workload: JSON, checks: Collection[str]) -> JSON | None:
    """The Workload's entry of `status.admissionChecks` for one of our checks."""
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") in checks:
            return dict(entry)
    return None


def quota_reserved(workload: JSON) -> bool:
    return condition_true(workload.get("status"), k.WORKLOAD_QUOTA_RESERVED)


def _closed(reason: str, message: str) -> Gate:
    return Gate(admits=False, holds=False, reason=reason, message=message)


def _evicted(workload: JSON) -> Gate | None:
    """Kueue evicted it (preempted, our check went Retry, ...): it resets every check to
    Pending at once, and releases the quota only once the job no longer runs."""
    evicted = condition(workload.get("status"), k.WORKLOAD_EVICTED)
    if evicted is None or evicted.get("status") != "True":
        return None
    return _closed(c.REASON_WITHDRAWN_BY_KUEUE,
                   f"Workload {workload['metadata']['name']} evicted by Kueue "
                   f"({evicted.get('reason')}): {evicted.get('message', '')}")


def _queued(workload: JSON) -> Gate:
    """No quota reserved: Kueue queues it; its own words, when it has some."""
    status = workload.get("status")
    name = workload["metadata"]["name"]
    reserved = condition(status, k.WORKLOAD_QUOTA_RESERVED) or {}
    said = f": {reserved['message']}" if reserved.get("message") else ""
    queue = (workload.get("spec") or {}).get("queueName", "")
    return _closed(c.REASON_WAITING_FOR_KUEUE,
                   f"waiting for Kueue to reserve quota for Workload {name} "
                   f"(LocalQueue {queue}){said}")


def gate_of(job: JSON, workload: JSON | None, checks: Collection[str], *,
            controller: str) -> Gate:
    """What `workload` (the job's, or None) allows; `checks` are the names of the
    AdmissionChecks whose controller is ours (`controller`)."""
    if workload is None:
        if not (job["metadata"].get("labels") or {}).get(c.LABEL_KUEUE_QUEUE):
            return _closed(c.REASON_WAITING_FOR_KUEUE,
                           f"no {c.LABEL_KUEUE_QUEUE} label: the manager's Kueue does not "
                           "queue it, and with admissionCheck.controllerName set only Kueue "
                           "hands jobs to the dispatcher")
        return _closed(c.REASON_WAITING_FOR_KUEUE,
                       "waiting for the manager's Kueue to create its Workload")
    name = workload["metadata"]["name"]
    if (workload.get("spec") or {}).get("active") is False:
        entry = check_of(workload, checks) or {}
        if entry.get("state") == k.CHECK_REJECTED:
            return _closed(c.REASON_CHECK_REJECTED,
                           f"AdmissionCheck {entry.get('name')} rejected it: "
                           f"{entry.get('message', '')}")
        evicted = condition(workload.get("status"), k.WORKLOAD_EVICTED) or {}
        said = f": {evicted['message']}" if evicted.get("message") else ""
        if evicted.get("reason") == k.EVICTED_BY_REJECTED_CHECK:
            return _closed(c.REASON_CHECK_REJECTED,
                           f"Workload {name} deactivated by Kueue{said} (the reason is in "
                           "Kueue's AdmissionCheckRejected event on the Workload)")
        return _closed(c.REASON_WITHDRAWN_BY_KUEUE, f"Workload {name} is deactivated{said}")
    withdrawn = _evicted(workload)
    if withdrawn is not None:
        return withdrawn
    if not quota_reserved(workload):
        return _queued(workload)
    ours = check_of(workload, checks)
    if ours is None:
        return _closed(c.REASON_NO_ADMISSION_CHECK,
                       f"the ClusterQueue of Workload {name} has no AdmissionCheck whose "
                       f"controllerName is {controller}: not dispatched")
    state, check = ours.get("state"), ours.get("name")
    if state == k.CHECK_PENDING:
        return Gate(admits=True, holds=True)
    if state == k.CHECK_READY:
        return Gate(admits=False, holds=True, reason=c.REASON_WAITING_FOR_KUEUE,
                    message=f"AdmissionCheck {check} is Ready but the job is not placed: "
                            "waiting for Kueue to requeue it")
    if state == k.CHECK_REJECTED:
        return _closed(c.REASON_CHECK_REJECTED,
                       f"AdmissionCheck {check} rejected it: {ours.get('message', '')}")
    return _closed(c.REASON_WAITING_FOR_KUEUE,
                   f"AdmissionCheck {check} is {state}: waiting for Kueue to requeue it "
                   f"({ours.get('message', '')})")
