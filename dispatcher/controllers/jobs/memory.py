"""What the controller remembers of one job that no cache can tell it, and nothing more.

`JobMemory` holds, per manager job UID: when the job was first seen and when the last
mirror news arrived (for the latency metrics), its demand for the generation and
runtime version it was computed from, the refusal of the mirror just asked for (decided
on at once), the last state of its deleted mirror (a tombstone), and the UIDs of mirrors
this process deleted (whose DELETED events are no news). When a job may be placed again
and which workers it is kept off are not here: they are in its Placement record, which
a restart does not forget. The controller
(`controller.py`) is its one writer: it records what the watches say and what its
writes found; the snapshot and `decide` only read it. `JobMemories.forget(uid)` drops
all of it, on every exit of a job: finalizer removed, finished, deleted (even while
pending), no longer claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

JSON = dict[str, Any]
DemandVersion = tuple[int, str]
"""(job generation, runtime resourceVersion): what a demand was computed from."""


@dataclass(frozen=True)
class Refusal:
    """A worker refused the mirror (or its name is taken there)."""

    worker: str
    reason: str
    message: str


@dataclass(slots=True)
class JobMemory:
    first_seen: float | None = None
    status_news: float | None = None
    demand: tuple[DemandVersion, dict[str, Fraction]] | None = None
    """(versions, demand) of the last computation."""
    refused: Refusal | None = None
    """The answer to the last mirror create, when it was a refusal not yet acted on."""
    tombstone: tuple[str, JSON] | None = None
    """(worker, last state) of the job's mirror deleted by someone else."""
    deleted_mirrors: frozenset[str] = frozenset()
    """Replaced, not changed in place: most jobs never have one, and share the empty set."""


class JobMemories:
    """One `JobMemory` per live job, by manager UID."""

    def __init__(self) -> None:
        self._by_uid: dict[str, JobMemory] = {}

    def __len__(self) -> int:
        return len(self._by_uid)

    def get(self, uid: str) -> JobMemory | None:
        return self._by_uid.get(uid)

    def of(self, uid: str) -> JobMemory:
        memory = self._by_uid.get(uid)
        if memory is None:
            memory = self._by_uid[uid] = JobMemory()
        return memory

    def forget(self, uid: str) -> None:
        self._by_uid.pop(uid, None)
