"""Behaviour side by side: a frozen worker, oversubscribed quota, a steady job rate.

Each scenario runs one system (bench/peer/systems.py) on fresh clusters
(bench/peer/env.py) with the same simulated trainer on every worker (it reports the
jobs running a second after they are unsuspended, and they run for an hour), the same
TrainJobs, and the harness's own watches of the workers (bench/peer/occupancy.py):

- `frozen`: jobs running on every worker; the kube-apiserver of the worker with the most
  is frozen (SIGSTOP) past the lost timeout, which both systems get alike. Measured: the
  seconds from the freeze until each of its jobs runs on another worker (p50/max), how
  many moved, and the jobs ever seen running on two workers at once: counting the frozen
  worker's copies as running while it is unreachable (their pods would be), and apart,
  those still seen on two workers at or after the thaw, until the stale copy is gone.
  The worker is thawed at the end and the run waits for the stale copies to go. A
  system that keeps a lost worker's jobs there (`workers.whenLost: Wait`) is watched
  for `hold_check_seconds` past the lost timeout instead: what moved, and after the
  thaw, how many of the frozen worker's jobs still run there.
- `oversubscribed`: small quotas on the workers (MultiKueue's manager queue gets their
  sum) and jobs asking for three times as much; the most jobs running at once, in all
  and on any worker, against what the quota allows, over a fixed window.
- `steady`: jobs created at a steady rate for a fixed time rather than in a burst;
  create -> remote running latency p50/p95/p99 of those that ran.
- `complete`: short jobs (`complete_run_seconds` each), three times what the quotas hold
  at once, in a burst; the seconds until all of them are Complete on the manager, beside
  the least it could take (three waves of the run time), and create -> Complete on the
  manager p50/p95/p99.
- `preemption`: an urgent job when every worker is full of low-priority jobs; in
  bench/peer/preemption.py, which builds on the helpers here (`Creator`,
  `running_system`, `until`, `job_quota`). bench/peer/behaviour.py runs them all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from bench.harness import JobWatch, bounded, percentiles, wait_for
from bench.peer.env import NAMESPACE, QUEUE, Environment, System, environment
from bench.peer.measure import WorkloadStages, steps
from bench.peer.occupancy import Occupancy
from bench.peer.systems import controllers
from devkit.factories import trainjob
from devkit.localcluster.simulated_trainer import RUN_SECONDS_ANNOTATION, SimulatedTrainer
from dispatcher.api import constants as c
from dispatcher.api.trainer import CONDITION_COMPLETE, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.resource import Resource

JOB_CPU, JOB_MEMORY_GI = 1, 2
"""What one job asks for (the sample runtime: one node, 1 CPU, 2Gi)."""
RUN_SECONDS = 3600.0
CREATE_CONCURRENCY = 8


@dataclass(frozen=True)
class ScenarioSizes:
    """How big each scenario is; `--quick` and the full runs differ only here."""

    lost_timeout_seconds: float = 30.0
    frozen_jobs_per_worker: int = 10
    place_timeout_seconds: float = 300.0
    move_timeout_seconds: float = 300.0
    """After the lost timeout: how long the frozen worker's jobs may take to move."""
    cleanup_timeout_seconds: float = 180.0
    hold_check_seconds: float = 60.0
    """A system that keeps a lost worker's jobs: how long past the lost timeout to watch
    that nothing moves."""
    quota_cpu_per_worker: int = 10
    """Each worker's CPU quota (and 2Gi per CPU) in oversubscribed, complete and
    preemption."""
    oversubscribed_window_seconds: float = 300.0
    steady_rate: float = 5.0
    steady_seconds: float = 120.0
    steady_tail_seconds: float = 300.0
    """After the last create: how long the last jobs may take to run."""
    complete_run_seconds: float = 10.0
    complete_timeout_seconds: float = 600.0
    preemption_timeout_seconds: float = 120.0
    """From the urgent job's creation: how long it may take to run."""
    preemption_settle_seconds: float = 10.0
    """After it runs: how long to go on watching for low jobs stopping."""
    real_chain: bool = False
    """`complete` on the real Trainer chain (Trainer, JobSet, kwok nodes) instead of the
    simulated trainer; the other scenarios ignore it."""


QUICK_SIZES = ScenarioSizes(frozen_jobs_per_worker=6, place_timeout_seconds=90.0,
                            move_timeout_seconds=90.0, cleanup_timeout_seconds=90.0,
                            hold_check_seconds=20.0,
                            quota_cpu_per_worker=4, oversubscribed_window_seconds=60.0,
                            steady_seconds=30.0, steady_tail_seconds=60.0,
                            complete_timeout_seconds=180.0)


def _job(name: str, run_seconds: float = RUN_SECONDS, *, size: int = 1,
         priority_class: str = "") -> dict[str, Any]:
    """A scenario's TrainJob: one job's demand (the runtime's) or `size` times it."""
    labels = {c.LABEL_KUEUE_QUEUE: QUEUE}
    if priority_class:
        labels[c.LABEL_PRIORITY_CLASS] = priority_class
    demand = None if size == 1 else {"requests": {
        "cpu": str(size * JOB_CPU), "memory": f"{size * JOB_MEMORY_GI}Gi"}}
    return trainjob(name, NAMESPACE, managed_by=MANAGED_BY_MULTIKUEUE, labels=labels,
                    annotations={RUN_SECONDS_ANNOTATION: str(run_seconds)},
                    resources_per_node=demand)


class Creator:
    """Creates the scenario's jobs on the manager, remembering when each was answered."""

    def __init__(self, env: Environment) -> None:
        self.jobs = Resource(env.clients["manager"], TRAINJOBS)
        self.created_at: dict[str, float] = {}

    async def create(self, name: str, run_seconds: float = RUN_SECONDS, *, size: int = 1,
                     priority_class: str = "") -> None:
        await self.jobs.create(_job(name, run_seconds, size=size,
                                    priority_class=priority_class), namespace=NAMESPACE)
        self.created_at[name] = time.monotonic()

    async def burst(self, count: int, prefix: str = "job",
                    run_seconds: float = RUN_SECONDS) -> list[str]:
        names = [f"{prefix}-{i:05d}" for i in range(count)]
        await bounded(CREATE_CONCURRENCY, [self.create(n, run_seconds) for n in names])
        return names


@asynccontextmanager
async def running_system(system: System, *, workers: int, log_name: str,
                         **environment_args: Any) -> AsyncIterator[tuple[Environment, Occupancy]]:
    """Fresh clusters, the system's controllers, a trainer (the simulated one, unless the
    environment runs the real chain) and a watch on every worker."""
    async with environment(system, workers=workers, **environment_args) as env, \
            controllers(env, log_name=log_name):
        trainers = [] if env.real_chain else [asyncio.create_task(
            SimulatedTrainer(env.clients[w], start_delay=0.5, run_seconds=RUN_SECONDS).run(),
            name=f"peer-trainer/{w}") for w in env.workers]
        occupancy = Occupancy({w: env.clients[w] for w in env.workers}, NAMESPACE)
        try:
            await occupancy.synced()
            yield env, occupancy
        finally:
            await occupancy.stop()
            for task in trainers:
                task.cancel()
            await asyncio.gather(*trainers, return_exceptions=True)


async def until(predicate: Callable[[], bool], deadline: float) -> bool:
    """`wait_for` up to a moment on the monotonic clock rather than for a span."""
    return await wait_for(predicate, timeout=deadline - time.monotonic(), interval=0.1)


def job_quota(jobs: int) -> dict[str, str]:
    """The quota that holds `jobs` jobs of one job's demand."""
    return {"cpu": str(jobs * JOB_CPU), "memory": f"{jobs * JOB_MEMORY_GI}Gi"}


async def frozen(system: System, *, workers: int, sizes: ScenarioSizes) -> dict[str, Any]:
    jobs = sizes.frozen_jobs_per_worker * workers
    # Room for twice a worker's share: the jobs spread over every worker (with room for
    # all of them the dispatcher's MostFree ties put them on one), and the frozen
    # worker's jobs fit on the others.
    per_worker = 2 * sizes.frozen_jobs_per_worker
    async with running_system(system, workers=workers, log_name=f"{system.name}-frozen",
                              lost_timeout_seconds=sizes.lost_timeout_seconds,
                              quota=job_quota(per_worker),
                              manager_quota=job_quota(per_worker * workers)
                              ) as (env, occupancy):
        creator = Creator(env)
        started = time.monotonic()
        await creator.burst(jobs)
        placed = await until(lambda: occupancy.running_count() >= jobs,
                             started + sizes.place_timeout_seconds)
        victim = max(env.workers, key=lambda w: occupancy.per_worker[w])
        moving = sorted(n for n, w in occupancy.running.items() if victim in w)
        frozen_at = time.monotonic()
        env.plane.clusters[victim].pause()

        def moved() -> dict[str, float]:
            result = {}
            for name in moving:
                times = [occupancy.started[(name, w)] for w in occupancy.running.get(name, ())
                         if w != victim and occupancy.started[(name, w)] >= frozen_at]
                if times:
                    result[name] = min(times) - frozen_at
            return result
        try:
            if system.when_lost == "Wait":
                await asyncio.sleep(sizes.lost_timeout_seconds + sizes.hold_check_seconds)
            else:
                await until(lambda: len(moved()) == len(moving),
                            frozen_at + sizes.lost_timeout_seconds + sizes.move_timeout_seconds)
            moved_after = moved()
        finally:
            env.plane.clusters[victim].resume()
        thawed_at = time.monotonic()
        occupancy.thawed()
        cleaned = await until(lambda: not occupancy.on_two_or_more(),
                              thawed_at + sizes.cleanup_timeout_seconds)
        cleanup = time.monotonic() - thawed_at
        kept = [n for n in moving if victim in occupancy.running.get(n, ())]
        return {
            "when_lost": system.when_lost,
            "jobs": jobs, "all_running_before_freeze": placed,
            "lost_timeout_seconds": sizes.lost_timeout_seconds,
            "quota_jobs_per_worker": per_worker,
            "frozen_worker": victim, "jobs_on_frozen_worker": len(moving),
            "frozen_seconds": round(thawed_at - frozen_at, 1),
            "moved": len(moved_after),
            "still_running_on_frozen_worker_after_thaw": len(kept),
            "freeze_to_running_elsewhere": _seconds(list(moved_after.values())),
            "ran_twice_at_once": len(occupancy.twice),
            "ran_twice_at_once_after_thaw": len(occupancy.twice_after_thaw),
            "stale_copies_gone": cleaned,
            "thaw_to_no_job_on_two_workers_seconds": round(cleanup, 1),
            "still_on_two_workers": len(occupancy.on_two_or_more()),
        }


def _seconds(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"p50_s": round(ordered[len(ordered) // 2], 1), "max_s": round(ordered[-1], 1)}


async def oversubscribed(system: System, *, workers: int, sizes: ScenarioSizes
                         ) -> dict[str, Any]:
    q = sizes.quota_cpu_per_worker
    allowed_per_worker = q // JOB_CPU
    quota = job_quota(allowed_per_worker)
    manager_quota = job_quota(allowed_per_worker * workers)
    allowed = allowed_per_worker * workers
    jobs = 3 * allowed
    async with running_system(system, workers=workers, log_name=f"{system.name}-oversub",
                              quota=quota, manager_quota=manager_quota) as (env, occupancy):
        creator = Creator(env)
        started = time.monotonic()
        await creator.burst(jobs)
        await asyncio.sleep(max(0.0, started + sizes.oversubscribed_window_seconds
                                - time.monotonic()))
        full = next((t - started for t, n in occupancy.timeline if n >= allowed), None)
        return {
            "jobs": jobs, "quota_cpu_per_worker": q, "allowed_at_once": allowed,
            "allowed_per_worker": allowed_per_worker,
            "window_seconds": sizes.oversubscribed_window_seconds,
            "max_running_at_once": occupancy.max_total,
            "max_running_on_a_worker": max(occupancy.max_per_worker.values()),
            "running_at_end": occupancy.total,
            "seconds_until_quota_full": None if full is None else round(full, 1),
            "workers_above_quota": {w: n for w, n in occupancy.max_per_worker.items()
                                    if n > allowed_per_worker},
            "ran_twice_at_once": len(occupancy.twice),
            "timeline": [*((round(t - started, 2), n) for t, n in occupancy.timeline),
                         (round(time.monotonic() - started, 2), occupancy.total)],
        }


async def steady(system: System, *, workers: int, sizes: ScenarioSizes) -> dict[str, Any]:
    count = int(sizes.steady_rate * sizes.steady_seconds)
    async with running_system(system, workers=workers, log_name=f"{system.name}-steady"
                              ) as (env, occupancy):
        stages = [WorkloadStages(env.clients[w], NAMESPACE) for w in env.workers]
        await asyncio.gather(*(s.informer.synced.wait() for s in stages))
        creator = Creator(env)
        names = [f"steady-{i:05d}" for i in range(count)]
        tasks = []
        started = time.monotonic()
        for index, name in enumerate(names):
            await asyncio.sleep(max(0.0, started + index / sizes.steady_rate - time.monotonic()))
            tasks.append(asyncio.create_task(creator.create(name)))
        await asyncio.gather(*tasks)
        created_seconds = time.monotonic() - started
        await until(lambda: len(occupancy.first_running) >= count,
                    time.monotonic() + sizes.steady_tail_seconds)
        latencies = [occupancy.first_running[n] - creator.created_at[n] for n in names
                     if n in occupancy.first_running and n in creator.created_at]
        worker_steps = steps(
            ["create", "remote_copy", "worker_workload", "worker_quota_reserved",
             "remote_running"],
            [creator.created_at, occupancy.first_seen,
             WorkloadStages.merged(stages, "created"),
             WorkloadStages.merged(stages, "QuotaReserved"), occupancy.first_running])
        for watch in stages:
            await watch.stop()
        return {
            "steps": worker_steps,
            "rate_per_second": sizes.steady_rate, "jobs": count,
            "create_seconds": round(created_seconds, 1),
            "tail_seconds": sizes.steady_tail_seconds, "ran": len(latencies),
            "create_to_remote_running": percentiles(latencies),
            "latencies": [round(v, 4) for v in latencies],
        }


async def complete(system: System, *, workers: int, sizes: ScenarioSizes) -> dict[str, Any]:
    allowed_per_worker = sizes.quota_cpu_per_worker // JOB_CPU
    allowed = allowed_per_worker * workers
    waves = 3
    jobs = waves * allowed
    async with running_system(system, workers=workers, log_name=f"{system.name}-complete",
                              quota=job_quota(allowed_per_worker),
                              manager_quota=job_quota(allowed), real_chain=sizes.real_chain,
                              run_seconds=sizes.complete_run_seconds) as (env, _occupancy):
        manager = JobWatch(env.clients["manager"], NAMESPACE, label="complete")
        await manager.informer.synced.wait()
        creator = Creator(env)
        started = time.monotonic()
        names = await creator.burst(jobs, prefix="short", run_seconds=sizes.complete_run_seconds)
        await until(lambda: len(manager.finished) >= jobs,
                    started + sizes.complete_timeout_seconds)
        await manager.stop()
        finished = {n: manager.finished[n] for n in names if n in manager.finished}
        complete = {n: at for n, (at, outcome) in finished.items() if outcome == CONDITION_COMPLETE}
        last = max(complete.values(), default=None)
        return {
            "trainer": "real chain (Trainer v2.3.0, JobSet v0.12.0, kwok nodes)"
                       if sizes.real_chain else "simulated",
            "jobs": jobs, "allowed_at_once": allowed, "run_seconds": sizes.complete_run_seconds,
            "timeout_seconds": sizes.complete_timeout_seconds,
            "complete": len(complete), "failed": len(finished) - len(complete),
            "seconds_until_all_complete": (round(last - started, 1)
                                           if last is not None and len(complete) == jobs
                                           else None),
            "least_possible_seconds": waves * sizes.complete_run_seconds,
            "create_to_complete": percentiles([at - creator.created_at[n]
                                               for n, at in complete.items()]),
            "timeline": [round(at - started, 2) for at in sorted(complete.values())],
        }
