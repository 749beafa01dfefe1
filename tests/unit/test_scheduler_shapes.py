"""One pass judges alike jobs once (`scheduler._Shape`): the decisions are those of a pass
that judges every job on its own, whatever the queue, the workers and the nominations.

A job given a selector of its own (a distinct function, the same labels matched) is a
shape of its own, so the same pass run with every job so disguised judges each job
alone: both passes must place the same jobs on the same workers, with the same reasons,
positions and victims. A waiting job's message is its shape's (its numbers are those the
first job of the shape saw in the pass), so only the other messages are compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.api import constants as c
from dispatcher.placement.options import PlacementPolicy, PreemptionPolicy, QueueingStrategy
from dispatcher.placement.preemption import Running
from dispatcher.placement.scheduler import (
    Decision,
    Nomination,
    PendingJob,
    WorkerView,
    schedule,
)
from dispatcher.placement.selector import parse_selector

SELECTORS = ["", "pool=a", "pool!=a"]


def _alone(job: PendingJob) -> PendingJob:
    selector = job.selector

    def own(labels: Mapping[str, str]) -> bool:
        return selector(labels)
    return dataclasses.replace(job, selector=own)


jobs = st.lists(st.tuples(st.sampled_from([2, 4, 8]), st.sampled_from([0, 5, 10]),
                          st.sampled_from(SELECTORS), st.booleans()),
                min_size=1, max_size=40)
workers = st.lists(st.tuples(st.sampled_from([4, 8, 16]), st.integers(0, 16),
                             st.sampled_from(["a", "b"]), st.booleans()),
                   min_size=1, max_size=6)


def _pass(pending: list[PendingJob], views: list[tuple[int, int, str, bool]], *,
          policy: PlacementPolicy, strategy: QueueingStrategy, preemption: PreemptionPolicy,
          nominations: dict[str, Nomination], running: dict[str, list[Running]]
          ) -> list[Decision]:
    return schedule(
        pending,
        [WorkerView(name=f"w{i}", quota={"cpu": Fraction(q)},
                    used={"cpu": Fraction(min(u, q))}, labels={"pool": pool}, active=active)
         for i, (q, u, pool, active) in enumerate(views)],
        policy=policy, strategy=strategy, preemption=preemption, nominations=nominations,
        running=lambda: running, now=100.0)


def _compared(decisions: list[Decision]) -> list[tuple[object, ...]]:
    return [(d.uid, d.worker, d.reason, d.position, d.preempting_on,
             tuple(v.uid for v in d.victims),
             "" if d.reason == c.REASON_WAITING_FOR_QUOTA else d.message) for d in decisions]


@settings(max_examples=500, deadline=None, derandomize=True)
@given(jobs, workers, st.sampled_from(list(PlacementPolicy)),
       st.sampled_from(list(QueueingStrategy)), st.sampled_from(list(PreemptionPolicy)),
       st.integers(0, 3))
def test_judging_alike_jobs_once_decides_as_judging_each_alone(
        specs: list[tuple[int, int, str, bool]], views: list[tuple[int, int, str, bool]],
        policy: PlacementPolicy, strategy: QueueingStrategy, preemption: PreemptionPolicy,
        nominated: int) -> None:
    pending = [PendingJob(key=f"ns/j{i}", uid=f"j{i}", demand={"cpu": Fraction(cpu)},
                          priority=priority, created=f"2026-12-07T00:00:{i:02d}Z",
                          selector=parse_selector(selector),
                          excluded=frozenset({"w0"}) if excluded else frozenset())
               for i, (cpu, priority, selector, excluded) in enumerate(specs)]
    running = {f"w{i}": [Running(uid=f"r{i}-{k}", key=f"ns/r{i}-{k}", worker=f"w{i}",
                                 demand={"cpu": Fraction(2)}, priority=k, started=float(k))
                         for k in range(2)] for i in range(len(views))}
    nominations = {job.uid: Nomination(f"w{n % len(views)}",
                                       frozenset({f"r{n % len(views)}-0"}))
                   for n, job in enumerate(pending[:nominated])}
    options = {"policy": policy, "strategy": strategy, "preemption": preemption,
               "nominations": nominations, "running": running}
    together = _pass(pending, views, **options)  # type: ignore[arg-type]
    alone = _pass([_alone(job) for job in pending], views, **options)  # type: ignore[arg-type]
    assert _compared(together) == _compared(alone)
