"""Choosing a worker for each pending job, in queue order: one pure scheduling pass.

Pending jobs are ordered by priority (higher first), then creation time, then key.
Each job goes to an eligible worker where its demand fits the free quota: active, not
cordoned, labels matching the job's cluster selector, not excluded for this job (it
rejected the job recently), holding the job's runtime (the worker's copy is what runs
the mirror; `PendingJob.missing_on` says which workers lack it, or cannot run the job
with theirs), and, for a worker running Kueue, one whose Kueue has the
WorkloadPriorityClass the job names (without it the worker's Kueue never creates the
mirror's Workload). A job's demand on a worker is what that worker's runtime makes of it
(`PendingJob.demand_on`), which may differ from the manager's. Among those, the policy
chooses: `MostFree` (the largest smallest-free-share across the demanded resources) or
`BestFit` (the smallest such share left after placing); ties go to the worker name in
sorting order.

Three ways to wait are told apart, each with a message a person can read:
- never fits (`Unschedulable`): the demand exceeds the *total* quota of every eligible
  worker, active or not, or needs a resource none of them offers ("needs 100000 cpu; the
  largest worker, worker-0, has 64 in total");
- waits for a worker (`NoActiveWorker`): only workers that are inactive or cordoned could
  ever hold it; the message names them and why;
- waits for quota (`WaitingForQuota`): an active worker could hold it once it frees up
  ("no worker has 4 nvidia.com/gpu free; best: worker-a with 2").
Jobs stay pending in every case, so each pass (run when workers or quotas change)
decides again. With `StrictFIFO`, the first job that waits for quota makes every later
job wait behind it; with `BestEffortFIFO` later jobs that fit are placed.

With preemption (`PreemptionPolicy.LowerPriority`), a job that waits for quota (and
waits behind no other, under `StrictFIFO`) is *nominated* on the one usable worker where
the cheapest set of lower-priority victims makes room (`preemption.py`): the decision is
`Preempting`, naming the worker and the victims. While the nomination holds (the caller
passes it back each pass), the job's demand is held on that worker, so no job after it
takes the room (a victim, of lower priority, comes later in the queue), its victims
are not chosen again by another job, and the job waits there until they are gone; then
it is placed like any other.
A nomination whose worker is no longer usable is chosen again; one whose victims are all
gone while the job still does not fit keeps waiting there for their room to come back (a
worker's Kueue frees a deleted mirror's quota only when its Workload goes) for up to
`ROOM_RETURN_SECONDS`, and is then chosen again.

A pass judges alike jobs once: jobs that ask the same of the workers (demand, selector,
exclusions, runtimes, priority class: `_shape_key`) share who could hold them, and, while
no room is given back during the pass, that none had room: a queue of 20,000 jobs of a
few shapes costs the workers a few times, not 20,000 (`bench fleet` times it). A waiting
job's message is then its shape's, with the numbers the first of them saw in the pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from dispatcher.api import constants as c
from dispatcher.placement import resources
from dispatcher.placement.options import PlacementPolicy, PreemptionPolicy, QueueingStrategy
from dispatcher.placement.preemption import Candidate, Preemption, Running, choose_preemption
from dispatcher.placement.quantity import format_quantity

Selector = Callable[[Mapping[str, str]], bool]

SAME_EVERYWHERE: Mapping[str, Any] = MappingProxyType({})
"""A `PendingJob`'s `demand_on` or `missing_on` when no worker differs (most jobs): one
empty mapping they all share."""


def _match_all(labels: Mapping[str, str]) -> bool:
    return True


def queue_order(*, priority: int, created: str, key: str) -> tuple[int, str, str]:
    """The queue's order, for the scheduler and for everyone who shows the queue:
    priority (higher first), then creation time, then key."""
    return (-priority, created, key)


QUEUED_REASONS = frozenset({c.REASON_WAITING_FOR_QUOTA, c.REASON_NO_ACTIVE_WORKER,
                            c.REASON_PREEMPTING})
"""The verdicts of a job that holds a place in the queue."""


def in_queue(reason: str) -> bool:
    """The queue's one membership rule: a job whose verdict is `reason` holds a place in
    the queue (it waits for room, or for a worker to come back, and each pass counts it
    toward `Decision.position`); Unschedulable, ineligible and not yet judged jobs do
    not. The scheduler, the status page and `dispatcher jobs` all ask this."""
    return reason in QUEUED_REASONS


@dataclass(frozen=True, slots=True)
class PendingJob:
    key: str
    uid: str
    demand: dict[str, Fraction]
    priority: int = 0
    created: str = ""
    """Creation time as RFC 3339 text, which sorts in time order."""
    selector: Selector = _match_all
    excluded: frozenset[str] = frozenset()
    priority_class: str = ""
    """The WorkloadPriorityClass the job's `kueue.x-k8s.io/priority-class` label names."""
    demand_on: Mapping[str, dict[str, Fraction]] = field(default_factory=dict)
    """Worker -> the job's demand there, where its runtime differs from the manager's."""
    missing_on: Mapping[str, str] = field(default_factory=dict)
    """Worker -> why the job cannot run there ("has no ClusterTrainingRuntime 'x'")."""

    def order(self) -> tuple[int, str, str]:
        return queue_order(priority=self.priority, created=self.created, key=self.key)

    def demand_of(self, worker: str) -> dict[str, Fraction]:
        return self.demand_on.get(worker, self.demand)


@dataclass
class WorkerView:
    """What the scheduler knows of one worker; `quota` None means unlimited."""

    name: str
    quota: dict[str, Fraction] | None
    used: dict[str, Fraction] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    active: bool = True
    cordoned: bool = False
    unavailable: str = ""
    """Why the worker takes no new jobs now, when it does not ("BadKubeconfig: ...")."""
    priority_classes: frozenset[str] | None = None
    """The WorkloadPriorityClasses its Kueue has; None when it runs no Kueue (or they
    could not be read), so any class goes."""

    def knows_priority_class(self, name: str) -> bool:
        return not name or self.priority_classes is None or name in self.priority_classes

    def free(self) -> dict[str, Fraction] | None:
        return None if self.quota is None else resources.remaining(self.quota, self.used)


@dataclass(frozen=True, slots=True)
class Decision:
    key: str
    uid: str
    worker: str | None
    reason: str
    message: str
    position: int = 0
    """1-based place in the queue among the jobs left waiting."""
    preempting_on: str = ""
    """`Preempting`: the worker the job is nominated on."""
    victims: tuple[Running, ...] = ()
    """`Preempting`: the jobs there that must end to make room for it."""
    awaiting: tuple[Running, ...] = ()
    """`Preempting`: lower-priority jobs already leaving there, whose room it counts on."""
    cleared: float | None = None
    """`Preempting`: when its victims were first seen gone, their room not yet back."""


@dataclass(frozen=True)
class Nomination:
    """A job waiting for its victims to end on `worker`: what a pass hands the next."""

    worker: str
    victims: frozenset[str]
    """The victims' UIDs."""
    awaiting: frozenset[str] = frozenset()
    """The UIDs of the leaving jobs whose room it counts on."""
    message: str = ""
    """What its decision said: kept while it waits, so the job's status stays as it is."""
    cleared: float | None = None
    """Wall-clock seconds when its victims were first seen gone while the job did not fit
    yet: a worker's Kueue frees a deleted mirror's quota only when its Workload goes."""

    @property
    def held(self) -> frozenset[str]:
        return self.victims | self.awaiting


ROOM_RETURN_SECONDS = 30.0
"""How long a nomination whose victims are gone keeps waiting on its worker for their
room to come back before the choice is made again (a worker lost or cordoned meanwhile
ends it at once)."""

RunningJobs = Callable[[], Mapping[str, Sequence[Running]]]
"""Worker -> the jobs holding quota there (booked or with a live mirror), read when a
pass first needs it."""


def _no_running() -> Mapping[str, Sequence[Running]]:
    return {}


def _preempting_message(worker: str, victims: Sequence[Running],
                        awaiting: Sequence[Running] = ()) -> str:
    if not victims:
        named = _named([v.key for v in awaiting])
        return (f"waiting on worker {worker} for the room of lower-priority jobs leaving "
                f"it: {named}")
    named = _named([f"{v.key} (priority {v.priority})" for v in victims])
    jobs = "job" if len(victims) == 1 else "jobs"
    return (f"preempting {len(victims)} lower-priority {jobs} on worker {worker} to make "
            f"room: {named}")


def _free_share(free: Mapping[str, Fraction] | None, quota: Mapping[str, Fraction] | None,
                demand: Mapping[str, Fraction]) -> Fraction:
    """The smallest free/quota ratio over the demanded, capped resources (1 if unlimited)."""
    if free is None or quota is None:
        return Fraction(1)
    shares = [free.get(r, Fraction(0)) / quota[r] for r in demand
              if demand[r] > 0 and r in quota and quota[r] > 0]
    return min(shares, default=Fraction(1))


def _choose(job: PendingJob, candidates: list[WorkerView], policy: PlacementPolicy) -> WorkerView:
    def score(worker: WorkerView) -> tuple[Fraction, str]:
        free, demand = worker.free(), job.demand_of(worker.name)
        if policy == PlacementPolicy.BEST_FIT:
            after = None if free is None else resources.subtract(free, demand)
            return (_free_share(after, worker.quota, demand), worker.name)
        return (-_free_share(free, worker.quota, demand), worker.name)

    return min(candidates, key=score)


_MAX_NAMED_WORKERS = 5


def _named(parts: list[str]) -> str:
    shown = "; ".join(parts[:_MAX_NAMED_WORKERS])
    more = len(parts) - _MAX_NAMED_WORKERS
    return f"{shown}; and {more} more" if more > 0 else shown


def _never_fits_message(job: PendingJob, workers: list[WorkerView]) -> str:
    """Why no eligible worker can ever hold the job (every one has a quota here)."""
    demand = job.demand if not job.demand_on else resources.maximum(
        [job.demand_of(w.name) for w in workers])
    for name, needed in sorted(demand.items()):
        totals = [(w.quota.get(name, Fraction(0)), w.name) for w in workers
                  if w.quota is not None and not (name == resources.PODS and name not in w.quota)]
        if needed <= 0 or len(totals) < len(workers):
            continue
        largest, holder = min(totals, key=lambda t: (-t[0], t[1]))
        if needed <= largest:
            continue
        wanted = f"needs {format_quantity(needed)} {name}"
        if largest == 0:
            return f"{wanted}; no matching worker offers {name}"
        which = "the only matching worker" if len(workers) == 1 else "the largest worker"
        return f"{wanted}; {which}, {holder}, has {format_quantity(largest)} in total"
    lacks = [f"{w.name} lacks {s.resource} ({format_quantity(s.needed)} needed, "
             f"{format_quantity(s.available)} in total)"
             for w in workers for s in resources.shortfalls(job.demand_of(w.name), w.quota)[:1]]
    return f"no matching worker has all it needs in total: {_named(lacks)}"


def _no_active_worker_message(workers: list[WorkerView]) -> str:
    named = [f"{w.name} ({'cordoned' if w.cordoned else w.unavailable or 'inactive'})"
             for w in workers]
    return f"only workers that are not active could hold it: {_named(named)}"


def _ineligible_reason(job: PendingJob, matching: list[WorkerView]) -> str:
    """Unschedulable only when waiting cannot help: a rejection by a worker passes."""
    if matching and all(w.name in job.missing_on for w in matching):
        return c.REASON_RUNTIME_NOT_FOUND
    if any(w.name in job.excluded for w in matching):
        return c.REASON_MIRROR_REJECTED
    return c.REASON_UNSCHEDULABLE


def _ineligible_message(job: PendingJob, matching: list[WorkerView]) -> str:
    if not matching:
        return "no worker matches the job's cluster selector"
    cannot = [w.name for w in matching if w.name in job.missing_on]
    if len(cannot) == len(matching):
        return "no matching worker can run it: " + _named(
            [f"{name} {job.missing_on[name]}" for name in cannot])
    lacking = [w.name for w in matching if not w.knows_priority_class(job.priority_class)]
    if len(lacking) == len(matching):
        return (f"WorkloadPriorityClass {job.priority_class!r} exists in the Kueue of no "
                f"matching worker ({_named(lacking)}): create it there, or change the "
                f"job's {c.LABEL_PRIORITY_CLASS} label")
    rejected = "every matching worker rejected the job"
    if lacking:
        return f"{rejected} or lacks WorkloadPriorityClass {job.priority_class!r}"
    return rejected


@dataclass
class _Shape:
    """What one pass learned of the jobs that ask the same of the workers (`_shape_key`):
    who could hold them, or why no one can (`verdict`, settled for the pass), and while
    no room is given back, that none of the usable workers had room (`full_since`) or
    victims to preempt (`no_victims`, by priority). So a pass costs the workers once per
    shape of job, not once per job: a long queue of alike jobs is walked, not rescanned."""

    usable: list[WorkerView]
    verdict: tuple[str, str] | None = None
    full_since: int | None = None
    waiting: str = ""
    no_victims: dict[int, int] = field(default_factory=dict)


def _shape_key(job: PendingJob) -> tuple[object, ...]:
    """What the scheduler asks of the workers for `job`: alike jobs have the same key."""
    return (tuple(sorted(job.demand.items())),
            tuple(sorted((w, tuple(sorted(d.items()))) for w, d in job.demand_on.items())),
            job.selector, job.excluded, tuple(sorted(job.missing_on.items())),
            job.priority_class)


def _judge(job: PendingJob, views: list[WorkerView]) -> _Shape:
    """The workers that could ever hold the job now, or why none can (`_Shape.verdict`)."""
    matching = [w for w in views if job.selector(w.labels)]
    eligible = [w for w in matching if w.name not in job.excluded
                and w.name not in job.missing_on
                and w.knows_priority_class(job.priority_class)]
    if not eligible:
        return _Shape([], (_ineligible_reason(job, matching),
                           _ineligible_message(job, matching)))
    holders = [w for w in eligible if resources.fits(job.demand_of(w.name), w.quota)]
    if not holders:
        return _Shape([], (c.REASON_UNSCHEDULABLE, _never_fits_message(job, eligible)))
    usable = [w for w in holders if w.active and not w.cordoned]
    if not usable:
        return _Shape([], (c.REASON_NO_ACTIVE_WORKER, _no_active_worker_message(holders)))
    return _Shape(usable)


def _waiting_message(job: PendingJob, workers: list[WorkerView]) -> str:
    best: tuple[int, str, str] | None = None
    for worker in workers:
        missing = resources.shortfalls(job.demand_of(worker.name), worker.free())
        if not missing:
            continue
        first = missing[0]
        text = (f"no worker has {format_quantity(first.needed)} {first.resource} free; "
                f"best: {worker.name} with {format_quantity(max(first.available, Fraction(0)))}")
        candidate = (len(missing), worker.name, text)
        if best is None or candidate[:1] < best[:1]:
            best = candidate
    return best[2] if best else "waiting for quota"


def schedule(
    pending: Iterable[PendingJob],
    workers: Iterable[WorkerView],
    *,
    policy: PlacementPolicy = PlacementPolicy.MOST_FREE,
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    preemption: PreemptionPolicy = PreemptionPolicy.NEVER,
    nominations: Mapping[str, Nomination] | None = None,
    running: RunningJobs = _no_running,
    now: float = 0.0,
) -> list[Decision]:
    """Decide for every pending job, in queue order; placements (and the demand held for
    nominated jobs) update `used` as they go."""
    views = sorted(workers, key=lambda w: w.name)
    by_name = {w.name: w for w in views}
    queue = sorted(pending, key=PendingJob.order)
    nominated = {job.uid: nomination for job in queue
                 if (nomination := (nominations or {}).get(job.uid)) is not None}
    spoken_for = {(uid, n.worker) for n in nominated.values() for uid in n.held}
    decisions: list[Decision] = []
    blocked_by: str | None = None
    waiting = 0
    read: Mapping[str, Sequence[Running]] | None = None

    def running_now() -> Mapping[str, Sequence[Running]]:
        nonlocal read
        if read is None:
            read = running()
        return read

    shapes: dict[tuple[object, ...], _Shape] = {}
    room_given_back = 0
    """Bumped whenever a pass gives room back (a nomination's hold released): until then
    `used` only grows, so a shape of job that found no room finds none later either."""

    def hold(job: PendingJob, worker: str, sign: int) -> None:
        nonlocal room_given_back
        view = by_name.get(worker)
        if view is not None:
            view.used = resources.add(view.used, resources.scale(job.demand_of(worker), sign))
            room_given_back += sign < 0

    def wait(job: PendingJob, reason: str, message: str) -> None:
        nonlocal waiting
        waiting += in_queue(reason)
        decisions.append(Decision(job.key, job.uid, None, reason, message,
                                  waiting if in_queue(reason) else 0))

    def preempt(job: PendingJob, usable: list[WorkerView], held: Nomination | None
                ) -> Decision | None:
        """The job's nomination: the one it `held` while its worker is usable and some of
        its victims remain, else the cheapest among `usable`; its demand is held there."""
        remaining: tuple[Running, ...] = ()
        if held is not None and any(w.name == held.worker for w in usable):
            remaining = tuple(v for v in running_now().get(held.worker, ())
                              if v.uid in held.held)
            cleared = now if held.cleared is None else held.cleared
            if not remaining and now - cleared < ROOM_RETURN_SECONDS:
                hold(job, held.worker, +1)  # the victims are gone, their room not yet back
                return Decision(job.key, job.uid, None, c.REASON_PREEMPTING,
                                held.message or f"waiting on worker {held.worker} for the "
                                "room of the jobs it preempted", preempting_on=held.worker,
                                cleared=cleared)
        if remaining:
            assert held is not None
            choice = Preemption(held.worker,
                                tuple(v for v in remaining if v.uid in held.victims),
                                tuple(v for v in remaining if v.uid in held.awaiting))
        else:
            candidates = {name: [v for v in jobs if (v.uid, name) not in spoken_for]
                          for name, jobs in running_now().items()}
            found = choose_preemption(
                job.priority,
                [Candidate(w.name, w.free(), job.demand_of(w.name)) for w in usable],
                candidates, now=now)
            if found is None:
                return None
            choice = found
        spoken_for.update((v.uid, choice.worker) for v in (*choice.victims, *choice.awaiting))
        hold(job, choice.worker, +1)
        return Decision(job.key, job.uid, None, c.REASON_PREEMPTING,
                        _preempting_message(choice.worker, choice.victims, choice.awaiting),
                        preempting_on=choice.worker, victims=choice.victims,
                        awaiting=choice.awaiting)

    for job in queue:
        if job.uid in nominated:  # the room held for it: no other job takes it
            hold(job, nominated[job.uid].worker, +1)
    for job in queue:
        held = nominated.pop(job.uid, None)
        if held is not None:  # its own hold is room for it, and its victims are free
            hold(job, held.worker, -1)
            spoken_for.difference_update((uid, held.worker) for uid in held.held)
        shape = shapes.get(key := _shape_key(job))
        if shape is None:
            shape = shapes[key] = _judge(job, views)
        if shape.verdict is not None:
            wait(job, *shape.verdict)
            continue
        usable = shape.usable
        known_full = held is None and shape.full_since == room_given_back
        fitting = [] if known_full else [
            w for w in usable if resources.fits(job.demand_of(w.name), w.free())]
        if not fitting and blocked_by is None and preemption is PreemptionPolicy.LOWER_PRIORITY:
            preempting = (None if held is None and shape.no_victims.get(job.priority)
                          == room_given_back else preempt(job, usable, held))
            if preempting is not None:
                waiting += 1
                decisions.append(dataclasses.replace(preempting, position=waiting))
                continue
            if held is None:
                shape.no_victims[job.priority] = room_given_back
        if blocked_by is not None or not fitting:
            if fitting:
                message = f"waiting behind {blocked_by} (StrictFIFO)"
            else:
                if not known_full:
                    shape.full_since = room_given_back
                    shape.waiting = _waiting_message(job, usable)
                message = shape.waiting
            wait(job, c.REASON_WAITING_FOR_QUOTA, message)
            if strategy == QueueingStrategy.STRICT_FIFO and blocked_by is None:
                blocked_by = job.key
            continue
        chosen = _choose(job, fitting, policy)
        chosen.used = resources.add(chosen.used, job.demand_of(chosen.name))
        decisions.append(Decision(job.key, job.uid, chosen.name, c.REASON_PLACED,
                                  f"placed on {chosen.name}"))
    return decisions
