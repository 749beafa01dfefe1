"""One line about a manager job for people: where it runs, its state, why it waits.

Read only from what is on the object (the placement annotation and the status), through
the one claim rule (`dispatcher.claim`) and the job kind's own rules for finished and
running, so the demo, the status page, `dispatcher jobs` and `kubectl` users all see
the same story.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.conditions import condition
from dispatcher.claim import Claim
from dispatcher.kinds import JobKind

# States of a job as people read them; a waiting job's state is its Dispatched reason,
# a finished job's the type of the condition that ended it.
STATE_NOT_CLAIMED = "NotClaimed"
STATE_PENDING = "Pending"
STATE_PLACED = "Placed"
STATE_RUNNING = "Running"


@dataclass(frozen=True)
class JobState:
    worker: str
    state: str
    message: str
    finished: bool = False


def job_state(job: Mapping[str, Any], *, claim: Claim, kind: JobKind) -> JobState:
    refusal = claim.refusal(job)
    if refusal:
        return JobState("", STATE_NOT_CLAIMED, refusal)
    status = dict(job.get("status") or {})
    worker = (job["metadata"].get("annotations") or {}).get(c.ANNOTATION_CLUSTER, "")
    finished = kind.finished(status)
    if finished is not None:
        return JobState(worker, str(finished["type"]),
                        finished.get("message") or finished.get("reason", ""), finished=True)
    if worker:
        if kind.running(dict(job)):
            return JobState(worker, STATE_RUNNING, f"running on {worker}")
        return JobState(worker, STATE_PLACED, f"mirror on {worker}")
    dispatched = condition(status, c.CONDITION_DISPATCHED)
    if dispatched:
        return JobState("", dispatched.get("reason", STATE_PENDING), dispatched.get("message", ""))
    return JobState("", STATE_PENDING, "not yet examined")
