"""What our entry of a Workload's admission checks should say, and whether a check is Active.

Pure, level-triggered from what the caches hold:
- `check_update(workload, checks, job)`: our check of a Workload with quota reserved
  (nothing while Kueue has not reserved quota, has evicted or deactivated it, or it
  finished: Kueue resets the checks itself then; nothing once the job itself finished,
  whose mirror and record go before Kueue marks the Workload `Finished`):
  - the dispatcher does not claim the job (`claim.py`: no `spec.managedBy` of ours,
    another namespace, labels not selected) -> `Rejected`, saying why (it would never
    run, and a `Pending` check would hold the team's quota for ever; Kueue deactivates
    the Workload, releases the quota and quotes the reason in its event);
  - the job is placed and its mirror exists -> `Ready`, naming the worker (with
    `readyWhen: WorkerAdmitted`, once the worker's Kueue admitted it too; `Pending`
    saying where it waits till then);
  - `Ready`, and the job is no longer placed (its mirror was evicted or its worker lost:
    the dispatcher took it off) -> `Retry`, with why (its record's last take-off; Kueue
    then evicts the Workload, releases its quota and queues it again);
  - `Pending`, and the scheduler found that no worker can ever hold it
    (`Unschedulable`) -> `Rejected` with the reason (Kueue deactivates the Workload
    instead of holding its quota forever);
  - `Pending` otherwise -> `Pending`, with why it waits (the jobs controller's decision
    on the job's snapshot, `JobsController.explain`, never its status read back);
  `Retry` and `Rejected` are left to Kueue.
- `active_of(registered, usable, parameters)`: an AdmissionCheck of ours is `Active`
  while some registered worker is usable and it names no parameters object; else not,
  saying why (Kueue then holds the ClusterQueues that use it inactive).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api import kueue as k
from dispatcher.api.conditions import condition, condition_true
from dispatcher.config import CheckReadyWhen
from dispatcher.controllers.admission.gate import check_of, quota_reserved

JSON = dict[str, Any]


@dataclass(frozen=True)
class WorkloadJob:
    """Where the job of a Workload stands, as the dispatcher knows it."""

    placed_on: str = ""
    """The worker of its placement record; empty while it is not placed."""
    mirrored: bool = False
    """Our mirror of it is on that worker."""
    admitted: bool = False
    """That mirror runs: the worker's Kueue admitted it (or the worker has no Kueue)."""
    why: tuple[str, str] = ("", "")
    """(reason, message): why it waits or where it runs, as the jobs controller decides
    on its snapshot now (`JobsController.explain`)."""
    taken_off: tuple[str, str] = ("", "")
    """(reason, message) of its last take-off from a worker, from its record."""
    finished: bool = False
    """The job is Complete or Failed on the manager."""
    refusal: str = ""
    """Why the dispatcher does not claim the job; empty when it does."""
    managed_by: str = ""
    """The `spec.managedBy` the job must carry to be claimed, when that is what it lacks."""


@dataclass(frozen=True)
class CheckUpdate:
    """Our entry of the Workload's admission checks to write."""

    name: str
    state: str
    message: str


@dataclass(frozen=True)
class Activity:
    """The Active condition an AdmissionCheck of ours should have."""

    active: bool
    reason: str
    message: str


def _open(workload: JSON) -> bool:
    """Quota reserved, not evicted, not deactivated, not finished."""
    status = workload.get("status")
    return (quota_reserved(workload)
            and (workload.get("spec") or {}).get("active") is not False
            and not condition_true(status, k.WORKLOAD_EVICTED)
            and not condition_true(status, k.WORKLOAD_FINISHED))


def check_update(workload: JSON, checks: Collection[str], job: WorkloadJob | None, *,
                 ready_when: CheckReadyWhen = CheckReadyWhen.MIRROR_CREATED
                 ) -> CheckUpdate | None:
    """The entry to write, or None when ours is as it should be (or is not ours to move)."""
    entry = check_of(workload, checks)
    if entry is None or job is None or job.finished or not _open(workload):
        return None
    name, state, message = entry["name"], entry.get("state"), entry.get("message", "")
    if job.refusal:
        wanted = ((k.CHECK_REJECTED, unclaimed_message(job.refusal, job.managed_by))
                  if state in (k.CHECK_PENDING, k.CHECK_READY) else None)
    else:
        wanted = _wanted(str(state), job, ready_when)
    if wanted is None or wanted == (state, message):
        return None
    return CheckUpdate(name=name, state=wanted[0], message=wanted[1])


def _wanted(state: str, job: WorkloadJob, ready_when: CheckReadyWhen) -> tuple[str, str] | None:
    """The (state, message) our check should have for a job the dispatcher claims."""
    reason, message = job.why
    waits_on_worker = ready_when is CheckReadyWhen.WORKER_ADMITTED and not job.admitted
    if job.placed_on and job.mirrored and not waits_on_worker:
        return (k.CHECK_READY, f"placed on worker {job.placed_on} by trainjob-dispatcher")
    if job.placed_on and job.mirrored and state == k.CHECK_PENDING:
        return (k.CHECK_PENDING, message or f"placed on worker {job.placed_on}, waiting "
                                            "for its Kueue to admit it")
    if job.placed_on:
        return None
    if state == k.CHECK_READY:
        return (k.CHECK_RETRY, f"taken off its worker: {job.taken_off[1] or 'no longer placed'}")
    if state == k.CHECK_PENDING:
        if reason == c.REASON_UNSCHEDULABLE:
            return (k.CHECK_REJECTED, f"no worker can hold it: {message}")
        if message:
            return (k.CHECK_PENDING, message)
    return None


def unclaimed_message(refusal: str, managed_by: str = "") -> str:
    """Our check's word on a job the dispatcher does not claim (`refusal`: `Claim`'s;
    `managed_by`: the `spec.managedBy` it lacks, if that is why)."""
    how = ""
    if managed_by:
        how = ("; Kueue sets spec.managedBy only under MultiKueue's own checks: create the "
               f"job with spec.managedBy: {managed_by}, or with the label "
               f"{c.LABEL_DISPATCH}: \"true\" where deploy/'s opt-in policy is installed")
    return (f"not dispatched: trainjob-dispatcher does not claim this job ({refusal}), so "
            f"it would never run; rejected to release its quota{how}")


def active_of(*, registered: int, usable: Collection[str], parameters: JSON | None = None
              ) -> Activity:
    """Whether a check of ours dispatches; `parameters` is its `spec.parameters`."""
    if parameters:
        named = " ".join(str(parameters.get(key, "")) for key in ("apiGroup", "kind", "name"))
        return Activity(False, c.REASON_PARAMETERS_NOT_SUPPORTED,
                        f"trainjob-dispatcher takes no parameters object (this check names "
                        f"{named.strip()}): remove spec.parameters; the workers it dispatches "
                        "to are the dispatcher's own configuration")
    if not registered:
        return Activity(False, c.REASON_NO_WORKERS,
                        "no worker cluster is registered with the dispatcher")
    if not usable:
        return Activity(False, c.REASON_NO_ACTIVE_WORKER,
                        f"none of the {registered} registered worker clusters is active")
    return Activity(True, c.REASON_CHECK_ACTIVE,
                    f"dispatching to {len(usable)} of {registered} worker clusters")


def active_condition(previous: JSON | None, activity: Activity, *, now: str,
                     generation: int) -> JSON | None:
    """The new Active condition, or None when `previous` already says it."""
    status = "True" if activity.active else "False"
    prior = condition(previous, c.CONDITION_ACTIVE) or {}
    if (prior.get("status"), prior.get("reason"), prior.get("message")) == (
            status, activity.reason, activity.message):
        return None
    since = prior.get("lastTransitionTime") if prior.get("status") == status else None
    return {"type": c.CONDITION_ACTIVE, "status": status, "reason": activity.reason,
            "message": activity.message, "lastTransitionTime": since or now,
            "observedGeneration": generation}
