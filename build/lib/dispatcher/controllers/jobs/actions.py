"""What `decide` can answer: one action per step, each carried out by the controller.

An action says everything its execution needs to know that is a judgement (which
mirror to delete, what to book, what to tell the user); the controller carries it out
and records what the writes found, never choosing between outcomes itself. Actions
that change the state (a record written, a mirror created or deleted) are followed at
once by the next decision; the others end the reconcile. Quota is released by the
actions that end a placement (`Finish`, `Unplace`, `Reject`, `DeleteRecord`) and by
those that find the job holds nothing (`Forget`, `Wait`), always the same way: the
booking and any reservation go, and the scheduler looks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.placement import PlacementRecord
from dispatcher.placement.scheduler import PendingJob

JSON = dict[str, Any]


@dataclass(frozen=True)
class Forget:
    """The job is out of the dispatcher's hands: its queue entry, booking and memory go."""


@dataclass(frozen=True)
class Requeue:
    """Nothing to do now: decide again after `seconds`."""

    seconds: float


@dataclass(frozen=True)
class Idle:
    """Nothing to do or show until the next news: a mirror with no status yet."""


@dataclass(frozen=True)
class Wait:
    """Not placed: withdraw it from the queue and show why, or, with `show_after`, decide
    again after that many seconds before showing it."""

    reason: str
    message: str
    warn: bool = False
    """Also a Warning event: the job is at fault and its status does not say so yet."""
    show_after: float | None = None


@dataclass(frozen=True)
class Enqueue:
    """Offer the job to the scheduler; show the scheduler's last word when it has one,
    or, with `show_after`, decide again after that many seconds before showing it."""

    entry: PendingJob
    reason: str = ""
    message: str = ""
    show_after: float | None = None


@dataclass(frozen=True)
class RecordPlacement:
    """The scheduler reserved `worker`: write the record, then the job's view of it."""

    worker: str
    demand: dict[str, Fraction]


@dataclass(frozen=True)
class Adopt:
    """A live mirror of the job runs on `worker` with no record of it: record it there,
    holding `demand`, whatever the quota says."""

    worker: str
    demand: dict[str, Fraction]


@dataclass(frozen=True)
class RewriteView:
    """The job's annotations or finalizer differ from its record: rewrite them."""

    differences: tuple[str, ...]


@dataclass(frozen=True)
class Book:
    """Placed on record but not in the ledger (after a restart): book `demand` there."""

    worker: str
    demand: dict[str, Fraction]


@dataclass(frozen=True)
class CreateMirror:
    worker: str
    demand: dict[str, Fraction]
    """The demand booked for it, carried on the mirror for the ledger to count."""


@dataclass(frozen=True)
class SyncStatus:
    worker: str
    mirror: JSON
    reason: str = c.REASON_PLACED
    message: str = ""
    recheck: float | None = None
    """Decide again after this many seconds even without news (an admission timeout)."""


@dataclass(frozen=True)
class Hold:
    """Placed, and its worker cannot be asked: keep the placement and show why."""

    worker: str
    reason: str
    message: str


@dataclass(frozen=True)
class Finish:
    """The mirror finished: the final status, then the quota released; the rest of the
    clean-up waits its turn."""

    worker: str
    mirror: JSON
    finished: JSON


@dataclass(frozen=True)
class Unplace:
    """Take the job off its worker: `mirror` deleted first, then the record says "not
    placed", the view and finalizer are cleared and the quota released; a requeue waits
    `backoff`, and an eviction fails the job once `evictions` reaches
    `mirror.maxEvictions`."""

    worker: str
    reason: str
    message: str
    eviction: bool
    """Counted in `dispatcher_evictions_total`."""
    event_reason: str = ""
    """A Warning event (and a log line) with this reason; none when empty (a move the
    user asked for, such as a suspension)."""
    count_requeue: bool = False
    """Counted in `dispatcher_requeues_total` by `reason`, and decided again after
    `backoff`; otherwise the job's own update brings it back."""
    evictions: int | None = None
    """The new eviction count to record; None when this one does not count."""
    fail: bool = False
    backoff: float = 0.0
    exclude: bool = False
    """Keep the job off this worker for `placement.rejectionBackoffSeconds` (and say so
    in an event)."""
    mirror: JSON | None = None
    """Our mirror to delete first; None when there is none, or its worker is lost or
    gone (given up on: the garbage collector deletes it on the worker's return)."""
    preemptor: str = ""
    """Preempted: the key of the job it makes room for (which gets an event too)."""


@dataclass(frozen=True)
class Reject:
    """The worker refused the mirror: the record says "not placed" and the worker is
    not offered the job for a while."""

    worker: str
    reason: str
    message: str


@dataclass(frozen=True)
class DeleteMirror:
    worker: str
    mirror: JSON
    """Our mirror there (its UID is the delete's precondition)."""


@dataclass(frozen=True)
class DeleteRecord:
    """The placement record goes (its mirror is gone or given up on): quota released."""

    record: PlacementRecord
    unclaimed: JSON | None = None
    """The record's job, still there but no longer claimed: told why its mirror went."""


@dataclass(frozen=True)
class DropFinalizer:
    job: JSON
    """The job to drop our finalizer from (claimed, or a job no longer claimed)."""
    reason: str = ""
    message: str = ""
    """When set, a Warning event on the job saying why (a job no longer claimed)."""


Action = (Forget | Requeue | Idle | Wait | Enqueue | RecordPlacement | Adopt | RewriteView
          | Book | CreateMirror | SyncStatus | Hold | Finish | Unplace | Reject
          | DeleteMirror | DeleteRecord | DropFinalizer)
