"""Choosing a worker for each pending job, in queue order: one pure scheduling pass.

Pending jobs are ordered by priority (higher first), then creation time, then key.
Each job goes to an eligible worker where its demand fits the free quota: active, not
cordoned, labels matching the job's cluster selector, not excluded for this job (it
rejected the job recently). Among those, the policy chooses: `MostFree` (the largest
smallest-free-share across the demanded resources) or `BestFit` (the smallest such
share left after placing); ties go to the worker name in sorting order.

A job that exceeds every eligible worker's *total* quota is `Unschedulable` at once. With
`StrictFIFO`, the first job that waits for quota makes every later job wait behind it;
with `BestEffortFIFO` later jobs that fit are placed. Every decision carries a message a
person can read ("no worker has 4 nvidia.com/gpu free; best: worker-a with 2").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from dispatcher.api import constants as c
from dispatcher.placement import resources
from dispatcher.placement.options import PlacementPolicy, QueueingStrategy
from dispatcher.placement.quantity import format_quantity

Selector = Callable[[Mapping[str, str]], bool]


def _match_all(labels: Mapping[str, str]) -> bool:
    return True


@dataclass(frozen=True)
class PendingJob:
    key: str
    uid: str
    demand: dict[str, Fraction]
    priority: int = 0
    created: str = ""
    """Creation time as RFC 3339 text, which sorts in time order."""
    selector: Selector = _match_all
    excluded: frozenset[str] = frozenset()

    def order(self) -> tuple[int, str, str]:
        return (-self.priority, self.created, self.key)


@dataclass
class WorkerView:
    """What the scheduler knows of one worker; `quota` None means unlimited."""

    name: str
    quota: dict[str, Fraction] | None
    used: dict[str, Fraction] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    active: bool = True
    cordoned: bool = False

    def free(self) -> dict[str, Fraction] | None:
        return None if self.quota is None else resources.remaining(self.quota, self.used)


@dataclass(frozen=True)
class Decision:
    key: str
    uid: str
    worker: str | None
    reason: str
    message: str
    position: int = 0
    """1-based place in the queue among the jobs left waiting."""


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
        free = worker.free()
        if policy == PlacementPolicy.BEST_FIT:
            after = None if free is None else resources.subtract(free, job.demand)
            return (_free_share(after, worker.quota, job.demand), worker.name)
        return (-_free_share(free, worker.quota, job.demand), worker.name)

    return min(candidates, key=score)


def _waiting_message(job: PendingJob, workers: list[WorkerView]) -> str:
    best: tuple[int, str, str] | None = None
    for worker in workers:
        missing = resources.shortfalls(job.demand, worker.free())
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
) -> list[Decision]:
    """Decide for every pending job, in queue order; placements update `used` as they go."""
    views = sorted(workers, key=lambda w: w.name)
    decisions: list[Decision] = []
    blocked_by: str | None = None
    waiting = 0
    for job in sorted(pending, key=PendingJob.order):
        eligible = [w for w in views if job.selector(w.labels) and w.name not in job.excluded]
        usable = [w for w in eligible if w.active and not w.cordoned]
        if not eligible:
            reason = c.REASON_UNSCHEDULABLE
            message = ("no worker matches the job's cluster selector" if not job.excluded
                       else "every matching worker rejected the job")
            decisions.append(Decision(job.key, job.uid, None, reason, message))
            continue
        if not usable:
            waiting += 1
            decisions.append(Decision(job.key, job.uid, None, c.REASON_NO_ACTIVE_WORKER,
                                      "no matching worker is active and uncordoned",
                                      waiting))
            continue
        if not any(resources.fits(job.demand, w.quota) for w in eligible):
            details = "; ".join(
                f"{w.name}: {resources.shortfalls(job.demand, w.quota)[0].describe()}"
                .replace(" free", " in total")
                for w in eligible
            )
            decisions.append(Decision(job.key, job.uid, None, c.REASON_UNSCHEDULABLE,
                                      f"larger than every worker's quota ({details})"))
            continue
        fitting = [w for w in usable if resources.fits(job.demand, w.free())]
        if blocked_by is not None or not fitting:
            waiting += 1
            message = (f"waiting behind {blocked_by} (StrictFIFO)" if blocked_by and fitting
                       else _waiting_message(job, usable))
            decisions.append(Decision(job.key, job.uid, None, c.REASON_WAITING_FOR_QUOTA,
                                      message, waiting))
            if strategy == QueueingStrategy.STRICT_FIFO and blocked_by is None:
                blocked_by = job.key
            continue
        chosen = _choose(job, fitting, policy)
        chosen.used = resources.add(chosen.used, job.demand)
        decisions.append(Decision(job.key, job.uid, chosen.name, c.REASON_PLACED,
                                  f"placed on {chosen.name}"))
    return decisions
