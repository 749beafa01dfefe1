"""The time of one scheduling decision, as the queue and the worker count grow.

A pure pass (`placement.scheduler.schedule`) over Q pending jobs and W workers that are
all full, so every job waits: the worst pass there is, since a job that is placed stops
the scan at its worker. The jobs ask for one of `shapes` demands: a pass judges alike
jobs once, so its cost goes as shapes x W + Q, not Q x W; `shapes = Q` (every job asks
something else) shows the bound. In this process, no cluster: the scheduler alone.
"""

from __future__ import annotations

import statistics
import time
from fractions import Fraction
from typing import Any

from dispatcher.placement.scheduler import PendingJob, WorkerView, schedule


def _pass_seconds(queued: int, workers: int, shapes: int, repeats: int) -> float:
    jobs = [PendingJob(key=f"bench/job-{i}", uid=f"uid-{i}",
                       demand={"cpu": Fraction(4 + i % shapes), "memory": Fraction(2**34),
                               "pods": Fraction(1)},
                       created=f"2026-12-07T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:"
                               f"{i % 60:02d}Z")
            for i in range(queued)]
    times = []
    for _ in range(repeats):
        views = [WorkerView(name=f"worker-{w:03d}", quota={"cpu": Fraction(64),
                                                           "memory": Fraction(2**40),
                                                           "pods": Fraction(1000)},
                            used={"cpu": Fraction(63), "pods": Fraction(1)})
                 for w in range(workers)]
        started = time.perf_counter()
        schedule(jobs, views)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def decision_curve(*, queues: tuple[int, ...], workers: tuple[int, ...],
                   shapes: tuple[int, ...], repeats: int = 3) -> list[dict[str, Any]]:
    """One row per (shapes, workers, queued): the pass's median time and per decision."""
    rows = []
    for kinds in shapes:
        for count in workers:
            for queued in queues:
                if kinds > queued:
                    continue
                seconds = _pass_seconds(queued, count, kinds, repeats)
                rows.append({"shapes": kinds, "workers": count, "queued": queued,
                             "pass_ms": round(seconds * 1000, 2),
                             "decision_us": round(seconds / queued * 1e6, 2)})
    return rows
