"""Where a mirror stands with its worker's Kueue: admitted, waiting, or evicted.

Pure reading of the mirror and its Kueue Workload (`kueue.x-k8s.io/v1beta2`):

- evicted: the Workload's `Evicted` (or `Preempted`) condition is True, or the mirror
  was suspended again after it had started (the kind tells);
- admitted: the mirror is not suspended (Kueue lifts the suspension when it admits);
- waiting: the mirror is suspended; the message is Kueue's own (the Workload's
  `QuotaReserved` condition: "couldn't assign flavors ... insufficient unused quota"),
  or says that no Workload exists yet; `since` is when that word was first true (the
  condition's `lastTransitionTime`, else the Workload's or the mirror's creation).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from dispatcher.kinds import JobKind

JSON = dict[str, Any]
UNCOUNTED_EVICTIONS = frozenset({"Preempted", "ClusterQueueStopped", "LocalQueueStopped"})
"""Kueue's eviction reasons the job did not cause: not counted toward `maxEvictions`."""


class Stage(Enum):
    ADMITTED = "admitted"
    WAITING = "waiting"
    EVICTED = "evicted"


@dataclass(frozen=True)
class Admission:
    stage: Stage
    reason: str = ""
    """Kueue's reason, when it gave one."""
    message: str = ""
    since: str = ""
    """RFC 3339: when the waiting stage's current word began, as the worker wrote it."""


def _created(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def _true(workload: JSON | None, type_: str) -> JSON | None:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def admission_of(mirror: JSON, workload: JSON | None, *, kind: JobKind) -> Admission:
    evicted = _true(workload, "Evicted") or _true(workload, "Preempted")
    if evicted is not None:
        reason = str(evicted.get("reason") or "")
        return Admission(Stage.EVICTED, reason, str(evicted.get("message") or reason))
    remotely = kind.evicted_remotely(mirror)
    if remotely is not None:
        return Admission(Stage.EVICTED, "", remotely)
    if not kind.suspended(mirror):
        return Admission(Stage.ADMITTED)
    if workload is None:
        return Admission(Stage.WAITING, "", "the worker's Kueue has not created its Workload "
                                            "yet", since=_created(mirror))
    admitted = _true(workload, "Admitted")
    if admitted is not None:
        return Admission(Stage.WAITING, "Admitted", "admitted; starting",
                         since=str(admitted.get("lastTransitionTime") or ""))
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "QuotaReserved":
            return Admission(Stage.WAITING, str(cond.get("reason") or ""),
                             str(cond.get("message") or cond.get("reason") or "pending"),
                             since=str(cond.get("lastTransitionTime") or ""))
    return Admission(Stage.WAITING, "", "pending in its queue", since=_created(workload))
