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


def job_state(job: dict[str, Any], *, managed_by: str) -> JobState:
    spec = job.get("spec") or {}
    if spec.get("managedBy") != managed_by:
        return JobState("", STATE_NOT_CLAIMED, "spec.managedBy is not the dispatcher's")
    status = job.get("status") or {}
    annotations = job["metadata"].get("annotations") or {}
    worker = annotations.get(c.ANNOTATION_CLUSTER, "")
    finished: dict[str, Any] | None = None
    dispatched: dict[str, Any] | None = None
    for cond in status.get("conditions") or []:
        type_ = cond.get("type")
        if type_ == c.CONDITION_DISPATCHED:
            dispatched = cond
        elif (type_ in (STATE_FAILED, STATE_COMPLETE) and cond.get("status") == "True"
              and (finished is None or type_ == STATE_FAILED)):
            finished = cond
    if finished is not None:
        return JobState(worker, finished["type"],
                        finished.get("message") or finished.get("reason", ""))
    if worker:
        if any(js.get("ready") for js in status.get("jobsStatus") or []):
            return JobState(worker, STATE_RUNNING, f"running on {worker}")
        return JobState(worker, STATE_PLACED, f"mirror on {worker}")
    if dispatched:
        return JobState("", dispatched.get("reason", STATE_PENDING), dispatched.get("message", ""))
    return JobState("", STATE_PENDING, "not yet examined")
