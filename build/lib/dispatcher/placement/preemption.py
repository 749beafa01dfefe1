"""Whom an urgent job preempts: one worker, and the fewest, least valuable victims there.

Pure. `choose_preemption(job, workers, running, now)` is asked for a pending job that
fits in no worker's free quota (the scheduler never asks for one that fits somewhere):

- only jobs of strictly lower priority than the preemptor are victims, and only on the
  workers the scheduler found eligible for it (active, not cordoned, its selector, its
  runtime, not excluded, and its demand within the worker's total quota);
- on each such worker the victims are taken lowest priority first and, among equals, the
  most recently started first (the least work lost), until the preemptor's demand fits
  in what is free plus what they hold; then each victim whose room is not needed after
  all is spared, the most valuable first, so no victim in the set could be left out;
- the worker whose set costs least wins: the fewest victims, then the lowest priorities
  (compared highest first), then the least run time lost, then the worker's name;
- a lower-priority job already *leaving* a worker (its mirror being deleted: taken off
  before a restart, or evicted) gives its room back without stopping anything: it is
  counted as free there first, and awaited, never chosen as a victim.

No worker where the victims make room (or none with a victim at all) gives None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from dispatcher.placement import resources

Vector = dict[str, Fraction]


@dataclass(frozen=True)
class Running:
    """A job placed on a worker, as a possible victim."""

    uid: str
    key: str
    worker: str
    demand: Vector
    priority: int = 0
    started: float = 0.0
    """Wall-clock seconds when it started there (its mirror's creation)."""
    leaving: bool = False
    """Its mirror is being deleted: its room comes back with no one stopped."""


@dataclass(frozen=True)
class Preemption:
    worker: str
    victims: tuple[Running, ...]
    awaiting: tuple[Running, ...] = ()
    """Lower-priority jobs leaving the worker whose room the preemptor counts on."""

    def cost(self, now: float) -> tuple[int, tuple[int, ...], float, str]:
        return (len(self.victims),
                tuple(sorted((v.priority for v in self.victims), reverse=True)),
                sum(max(0.0, now - v.started) for v in self.victims), self.worker)


def _victim_order(victim: Running) -> tuple[int, float, str]:
    return (victim.priority, -victim.started, victim.key)


def victims_on(demand: Vector, free: Vector | None, candidates: Iterable[Running], *,
               priority: int) -> tuple[Running, ...] | None:
    """The smallest set of `candidates` below `priority` whose room, added to `free` and
    to the room of those leaving, fits `demand`, in the order they were taken; None when
    all of them would not do."""
    if free is None or resources.fits(demand, free):
        return ()
    lower = [v for v in candidates if v.priority < priority]
    room, chosen = dict(free), []
    for leaving in (v for v in lower if v.leaving):
        room = resources.add(room, leaving.demand)
    if resources.fits(demand, room):
        return ()
    for victim in sorted((v for v in lower if not v.leaving), key=_victim_order):
        chosen.append(victim)
        room = resources.add(room, victim.demand)
        if resources.fits(demand, room):
            break
    else:
        return None
    for victim in reversed(chosen[:-1]):
        without = resources.subtract(room, victim.demand)
        if resources.fits(demand, without):
            chosen.remove(victim)
            room = without
    return tuple(chosen)


@dataclass(frozen=True)
class Candidate:
    """An eligible worker, as the preemption choice sees it."""

    name: str
    free: Vector | None
    """Its free quota (None: unlimited)."""
    demand: Vector
    """The preemptor's demand there."""


def choose_preemption(priority: int, workers: Sequence[Candidate],
                      running: Mapping[str, Sequence[Running]], *, now: float
                      ) -> Preemption | None:
    """The cheapest preemption for a job of `priority` over the eligible `workers`
    (`running`: worker -> the jobs placed there that may be preempted)."""
    options = []
    for worker in workers:
        if worker.free is None or resources.fits(worker.demand, worker.free):
            continue
        there = running.get(worker.name, ())
        victims = victims_on(worker.demand, worker.free, there, priority=priority)
        if victims is not None:
            awaiting = tuple(v for v in there if v.leaving and v.priority < priority)
            if victims or awaiting:
                options.append(Preemption(worker.name, victims, awaiting))
    return min(options, key=lambda option: option.cost(now), default=None)
