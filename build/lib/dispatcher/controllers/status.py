"""The manager job's status: the mirror's status plus the dispatcher's own condition.

The manager's `status.conditions` holds the mirror's conditions as the worker wrote
them, next to one condition of the dispatcher, `dispatcher.trainjob.io/Dispatched`: True
while a mirror runs the job (message: which worker), False with the reason it waits
(`WaitingForQuota`, `RuntimeNotFound`, `Unschedulable`, `Evicted`, ...). The fields
copied are the kind's (`JobKind.status_fields`).
"""

from __future__ import annotations

import datetime
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.conditions import condition
from dispatcher.kinds import JobKind

JSON = dict[str, Any]
MAX_MESSAGE = 32000


def rfc3339(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def dispatched_condition(job: JSON, *, placed: bool, reason: str, message: str,
                         now: str) -> JSON:
    """The Dispatched condition, keeping its transition time while its status holds."""
    status = "True" if placed else "False"
    previous = condition(job.get("status"), c.CONDITION_DISPATCHED)
    since = (previous or {}).get("lastTransitionTime")
    if previous is None or previous.get("status") != status or not since:
        since = now
    return {
        "type": c.CONDITION_DISPATCHED,
        "status": status,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "lastTransitionTime": since,
        "observedGeneration": job["metadata"].get("generation", 0),
    }


def with_mirror(kind: JobKind, mirror_status: JSON, dispatched: JSON) -> JSON:
    """Desired manager status while a mirror exists: its status and our condition."""
    conditions = [cond for cond in mirror_status.get("conditions") or []
                  if cond.get("type") != c.CONDITION_DISPATCHED]
    conditions.append(dispatched)
    desired: JSON = {"conditions": conditions}
    for field in kind.status_fields:
        if field != "conditions":
            desired[field] = mirror_status.get(field)
    return desired


def without_mirror(kind: JobKind, job: JSON, dispatched: JSON, *, now: str,
                   extra: list[JSON] | None = None) -> JSON:
    """Desired manager status while no mirror runs the job: nothing claims it runs."""
    conditions = list(extra or [])
    if job["spec"].get("suspend"):
        conditions.append(kind.suspended_condition(job.get("status"), now))
    conditions.append(dispatched)
    desired: JSON = {field: None for field in kind.status_fields}
    desired["conditions"] = conditions
    return desired


def _comparable(conditions: list[JSON] | None) -> list[tuple[Any, ...]]:
    return sorted(
        (d.get("type"), d.get("status"), d.get("reason"), d.get("message"),
         d.get("lastTransitionTime"))
        for d in conditions or []
    )


def status_patch(kind: JobKind, job: JSON, desired: JSON) -> JSON | None:
    """A merge patch turning the job's status into `desired`, or None when equal."""
    current = job.get("status") or {}
    patch: JSON = {}
    for field in kind.status_fields:
        want = desired.get(field)
        have = current.get(field)
        same = (_comparable(want) == _comparable(have)) if field == "conditions" else want == have
        if not same and not (want is None and have is None):
            patch[field] = want
    return patch or None
