"""One line about a manager TrainJob for people: where it runs, its state, why it waits.

Read only from what is on the object (annotations and status), so the demo, the
`dispatcher jobs` command and `kubectl` users all see the same story.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.trainer import CONDITION_COMPLETE, CONDITION_FAILED

# States of a job as people read them; a waiting job's state is its Dispatched reason.
STATE_NOT_CLAIMED = "NotClaimed"
STATE_PENDING = "Pending"
STATE_PLACED = "Placed"
STATE_RUNNING = "Running"
STATE_COMPLETE = CONDITION_COMPLETE
STATE_FAILED = CONDITION_FAILED


@dataclass(frozen=True)
class JobState:
    worker: str
    state: str
    message: str


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((x for x in status.get("conditions") or [] if x.get("type") == type_), None)


def job_state(job: dict[str, Any], *, managed_by: str) -> JobState:
    spec = job.get("spec") or {}
    if spec.get("managedBy") != managed_by:
        return JobState("", STATE_NOT_CLAIMED, "spec.managedBy is not the dispatcher's")
    status = job.get("status") or {}
    annotations = job["metadata"].get("annotations") or {}
    worker = annotations.get(c.ANNOTATION_CLUSTER, "")
    for type_ in (STATE_FAILED, STATE_COMPLETE):
        cond = _condition(status, type_)
        if cond and cond.get("status") == "True":
            return JobState(worker, type_, cond.get("message") or cond.get("reason", ""))
    dispatched = _condition(status, c.CONDITION_DISPATCHED)
    if worker:
        if any(js.get("active") for js in status.get("jobsStatus") or []):
            return JobState(worker, STATE_RUNNING, f"running on {worker}")
        return JobState(worker, STATE_PLACED, f"mirror on {worker}")
    if dispatched:
        return JobState("", dispatched.get("reason", STATE_PENDING), dispatched.get("message", ""))
    return JobState("", STATE_PENDING, "not yet examined")
