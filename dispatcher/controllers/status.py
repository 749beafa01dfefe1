"""The manager TrainJob's status: the mirror's status plus the dispatcher's own condition.

The manager's `status.conditions` holds the mirror's conditions as the worker's trainer
wrote them, next to one condition of the dispatcher, `dispatcher.trainjob.io/Dispatched`:
True while a mirror runs the job (message: which worker), False with the reason it waits
(`WaitingForQuota`, `RuntimeNotFound`, `Unschedulable`, `Evicted`, ...).
"""

from __future__ import annotations

import datetime
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.trainer import CONDITION_SUSPENDED
from dispatcher.controllers.trainjob_kind import STATUS_FIELDS, condition

JSON = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def dispatched_condition(job: JSON, *, placed: bool, reason: str, message: str) -> JSON:
    """The Dispatched condition, keeping its transition time while its status holds."""
    status = "True" if placed else "False"
    previous = condition(job.get("status"), c.CONDITION_DISPATCHED)
    since = (previous or {}).get("lastTransitionTime")
    if previous is None or previous.get("status") != status or not since:
        since = now_rfc3339()
    return {
        "type": c.CONDITION_DISPATCHED,
        "status": status,
        "reason": reason,
        "message": message[:32000],
        "lastTransitionTime": since,
        "observedGeneration": job["metadata"].get("generation", 0),
    }


def with_mirror(job: JSON, mirror_status: JSON, dispatched: JSON) -> JSON:
    """Desired manager status while a mirror exists: its status and our condition."""
    conditions = [cond for cond in mirror_status.get("conditions") or []
                  if cond.get("type") != c.CONDITION_DISPATCHED]
    conditions.append(dispatched)
    desired: JSON = {"conditions": conditions}
    for field in ("jobsStatus", "trainerStatus"):
        desired[field] = mirror_status.get(field)
    return desired


def without_mirror(job: JSON, dispatched: JSON, *, extra: list[JSON] | None = None) -> JSON:
    """Desired manager status while no mirror runs the job: nothing claims it runs."""
    conditions = list(extra or [])
    if job["spec"].get("suspend"):
        previous = condition(job.get("status"), CONDITION_SUSPENDED)
        conditions.append({
            "type": CONDITION_SUSPENDED, "status": "True", "reason": "Suspended",
            "message": "TrainJob is suspended",
            "lastTransitionTime": (previous or {}).get("lastTransitionTime") or now_rfc3339(),
        })
    conditions.append(dispatched)
    return {"conditions": conditions, "jobsStatus": None, "trainerStatus": None}


def _comparable(conditions: list[JSON] | None) -> list[tuple[Any, ...]]:
    return sorted(
        (d.get("type"), d.get("status"), d.get("reason"), d.get("message"),
         d.get("lastTransitionTime"))
        for d in conditions or []
    )


def status_patch(job: JSON, desired: JSON) -> JSON | None:
    """A merge patch turning the job's status into `desired`, or None when equal."""
    current = job.get("status") or {}
    patch: JSON = {}
    for field in STATUS_FIELDS:
        want = desired.get(field)
        have = current.get(field)
        same = (_comparable(want) == _comparable(have)) if field == "conditions" else want == have
        if not same and not (want is None and have is None):
            patch[field] = want
    return patch or None
