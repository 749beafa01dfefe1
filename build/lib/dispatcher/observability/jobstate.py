"""One line about a manager job for people: where it runs, its state, why it waits.

Where the job is placed comes from its Placement record (`placed_on`: the caller reads
the records, never the job's `cluster` annotation, which any user who may edit the job
can write); the rest from the job's status, through the one claim rule
(`dispatcher.claim`) and the job kind's own rules for finished and running, so the
demo, the status page, `dispatcher jobs` and `kubectl` users all see the same story.
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
class JobLine:
    worker: str
    state: str
    message: str
    finished: bool = False


def job_state(job: Mapping[str, Any], *, claim: Claim, kind: JobKind,
              placed_on: str) -> JobLine:
    """`placed_on`: the worker of the job's Placement record ("" when not placed)."""
    refusal = claim.refusal(job)
    if refusal:
        return JobLine("", STATE_NOT_CLAIMED, refusal)
    status = dict(job.get("status") or {})
    finished = kind.finished(status)
    if finished is not None:
        return JobLine(placed_on, str(finished["type"]),
                       finished.get("message") or finished.get("reason", ""), finished=True)
    if placed_on:
        if kind.running(dict(job)):
            return JobLine(placed_on, STATE_RUNNING, f"running on {placed_on}")
        return JobLine(placed_on, STATE_PLACED, f"mirror on {placed_on}")
    dispatched = condition(status, c.CONDITION_DISPATCHED)
    if dispatched:
        return JobLine("", dispatched.get("reason", STATE_PENDING), dispatched.get("message", ""))
    return JobLine("", STATE_PENDING, "not yet examined")
