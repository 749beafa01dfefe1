"""The `preemption` scenario: an urgent job arrives when every worker is full.

Every cluster gets two WorkloadPriorityClasses (`bench-low` 10, `bench-high` 1000) and
every ClusterQueue `preemption: {withinClusterQueue: LowerPriority}`; every Kueue of a
MultiKueue run gets the `MultiKueueOrchestratedPreemption` feature gate (Kueue v0.17,
alpha): MultiKueue gives its copies of a Workload a preemption gate, each worker's
scheduler holds a gated copy back when it would have to preempt and says so, and the
manager opens the gate on one worker at a time, the one that said so first (the gate is
read by the workers' Kueue too, hence on everywhere). The manager's ClusterQueue has
room for every job, as in Kueue's own test of the gate, so MultiKueue's manager admits
the urgent job at once and the preemption measured is the workers'. The dispatcher
(`placement.preemption.policy: LowerPriority`) chooses the worker and the victims itself.

Each worker's quota is Q CPU (`quota_cpu_per_worker`, 2Gi per CPU). The workers are
filled with low-priority jobs in steps that make the layout the same for every system,
whatever its placement, each step waiting until its jobs run:
1. one big job (Q/2 CPU): the worker it runs on is the big worker;
2. one blocker (Q CPU) per other worker: only they have room;
3. a second big job: only the big worker has room;
4. the blockers deleted, until no copy of them runs;
5. small jobs (1 CPU) for all the room left: only the other workers have it.
Then one urgent job (`bench-high`, Q/2 CPU: one big job's demand, Q/2 small ones') is
created. Room for it costs one big job on the big worker, Q/2 small jobs anywhere else.

Measured from the harness's watches of the workers (bench/peer/occupancy.py): seconds
from the urgent job's creation (its create answered) until it runs on a worker, or that
it did not within `preemption_timeout_seconds`; which worker; the low jobs that stopped
running after its creation (suspended by a worker's Kueue, their copy deleted), per
worker, watched until `preemption_settle_seconds` after it ran; and the jobs ever seen
running on two workers at once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from bench.harness import bounded
from bench.peer.env import NAMESPACE, QUOTA, Environment, PreemptionSetup, System
from bench.peer.occupancy import Occupancy
from bench.peer.scenarios import (
    CREATE_CONCURRENCY,
    Creator,
    ScenarioSizes,
    job_quota,
    running_system,
    until,
)

LOW, HIGH = "bench-low", "bench-high"
PRIORITY_CLASSES = {LOW: 10, HIGH: 1000}
ORCHESTRATED_PREEMPTION = "MultiKueueOrchestratedPreemption=true"
"""Kueue v0.17's gate (pkg/features/kube_features.go), alpha and off by default."""
LOWER_PRIORITY = {"withinClusterQueue": "LowerPriority"}
URGENT = "urgent"
FEWEST_STOPPED = 1
"""The fewest low jobs any choice could stop: one big job on the big worker."""


def setup(system: System) -> PreemptionSetup:
    """The priority classes and queue policy of every run; the gate for MultiKueue's."""
    return PreemptionSetup(
        priority_classes=dict(PRIORITY_CLASSES), cluster_queue_preemption=dict(LOWER_PRIORITY),
        kueue_feature_gates=(ORCHESTRATED_PREEMPTION,) if system.kind == "multikueue" else ())


@dataclass
class Layout:
    """The low jobs the workers were filled with, and whether every step ran in time."""

    big_cpu: int
    big_worker: str = ""
    cpu: dict[str, int] = field(default_factory=dict)
    """Low job -> its CPU."""
    failed_step: str = ""
    """The step that did not run in time (or placed a job elsewhere); "" when all ran."""


async def _run(creator: Creator, occupancy: Occupancy, names: list[str], *, cpu: int,
               timeout: float) -> bool:
    """Create low jobs of `cpu` CPU each; True once all of them run."""
    await bounded(CREATE_CONCURRENCY, [creator.create(n, size=cpu, priority_class=LOW)
                                       for n in names])
    return await until(lambda: all(occupancy.running.get(n) for n in names),
                       time.monotonic() + timeout)


async def fill(env: Environment, creator: Creator, occupancy: Occupancy, *, quota_cpu: int,
               sizes: ScenarioSizes) -> Layout:
    """The five steps of the module docstring; stops at the first that times out."""
    layout = Layout(big_cpu=quota_cpu // 2)
    timeout = sizes.place_timeout_seconds
    blockers = [f"blocker-{i:02d}" for i in range(len(env.workers) - 1)]
    smalls = [f"small-{i:05d}"
              for i in range(len(env.workers) * quota_cpu - 2 * layout.big_cpu)]
    layout.cpu["big-0"] = layout.big_cpu
    if not await _run(creator, occupancy, ["big-0"], cpu=layout.big_cpu, timeout=timeout):
        layout.failed_step = "the first big job"
        return layout
    layout.big_worker = min(occupancy.running["big-0"])
    if not await _run(creator, occupancy, blockers, cpu=quota_cpu, timeout=timeout):
        layout.failed_step = "the blockers"
        return layout
    layout.cpu["big-1"] = layout.big_cpu
    if not await _run(creator, occupancy, ["big-1"], cpu=layout.big_cpu, timeout=timeout):
        layout.failed_step = "the second big job"
        return layout
    if occupancy.running["big-1"] != {layout.big_worker}:
        layout.failed_step = "the second big job (not on the big worker)"
        return layout
    await bounded(CREATE_CONCURRENCY, [creator.jobs.delete(n, namespace=NAMESPACE)
                                       for n in blockers])
    if not await until(lambda: not any(occupancy.running.get(n) for n in blockers),
                       time.monotonic() + sizes.cleanup_timeout_seconds):
        layout.failed_step = "the blockers' removal"
        return layout
    layout.cpu.update(dict.fromkeys(smalls, 1))
    if not await _run(creator, occupancy, smalls, cpu=1, timeout=timeout):
        layout.failed_step = "the small jobs"
    return layout


def stopped_since(occupancy: Occupancy, since: float, jobs: set[str]) -> dict[str, list[str]]:
    """Worker -> those of `jobs` that stopped running there at or after `since`."""
    found: dict[str, set[str]] = {w: set() for w in occupancy.workers}
    for at, name, worker in occupancy.stopped:
        if at >= since and name in jobs:
            found[worker].add(name)
    return {w: sorted(names) for w, names in found.items()}


def _on_each_worker(occupancy: Occupancy, layout: Layout) -> dict[str, dict[str, int]]:
    """Worker -> CPU of one low job -> how many such jobs ran there before the urgent."""
    result: dict[str, dict[str, int]] = {w: {} for w in occupancy.workers}
    for name, cpu in layout.cpu.items():
        for worker in occupancy.running.get(name, ()):
            result[worker][f"{cpu} CPU"] = result[worker].get(f"{cpu} CPU", 0) + 1
    return result


async def preemption(system: System, *, workers: int, sizes: ScenarioSizes) -> dict[str, Any]:
    quota_cpu = sizes.quota_cpu_per_worker
    if quota_cpu < 2:
        raise ValueError("the preemption scenario needs a quota of at least 2 CPU a worker")
    prepared = setup(system)
    async with running_system(system, workers=workers, log_name=f"{system.name}-preemption",
                              quota=job_quota(quota_cpu), manager_quota=dict(QUOTA),
                              preemption=prepared) as (env, occupancy):
        creator = Creator(env)
        layout = await fill(env, creator, occupancy, quota_cpu=quota_cpu, sizes=sizes)
        before = _on_each_worker(occupancy, layout)
        low = set(layout.cpu)
        result: dict[str, Any] = {
            "priority_classes": PRIORITY_CLASSES,
            "low_priority": PRIORITY_CLASSES[LOW], "urgent_priority": PRIORITY_CLASSES[HIGH],
            "cluster_queue_preemption": LOWER_PRIORITY,
            "kueue_feature_gates": list(prepared.kueue_feature_gates),
            "quota_cpu_per_worker": quota_cpu, "urgent_cpu": layout.big_cpu,
            "big_worker": layout.big_worker, "low_jobs": len(low),
            "low_jobs_before_urgent": before,
            "all_low_running_before_urgent": not layout.failed_step,
            "failed_step": layout.failed_step,
            "timeout_seconds": sizes.preemption_timeout_seconds,
            "fewest_possible_stopped": FEWEST_STOPPED,
        }
        if layout.failed_step:
            return {**result, "urgent_ran": False, "ran_twice_at_once": len(occupancy.twice)}
        sent = time.monotonic()  # stops count from here, the latency from the answer
        await creator.create(URGENT, size=layout.big_cpu, priority_class=HIGH)
        created = creator.created_at[URGENT]
        ran = await until(lambda: URGENT in occupancy.first_running,
                          created + sizes.preemption_timeout_seconds)
        if ran:
            await asyncio.sleep(sizes.preemption_settle_seconds)
        stopped = stopped_since(occupancy, sent, low)
        stop_times = [at - created for at, name, _ in occupancy.stopped
                      if at >= sent and name in low]
        ran_on = sorted(w for (name, w) in occupancy.started if name == URGENT)
        return {
            **result,
            "urgent_ran": ran,
            "create_to_urgent_running_seconds": (
                round(occupancy.first_running[URGENT] - created, 2) if ran else None),
            "urgent_ran_on": ran_on,
            "urgent_on_big_worker": ran_on == [layout.big_worker],
            "settle_seconds": sizes.preemption_settle_seconds,
            "stopped": stopped,
            "stopped_count": sum(len(names) for names in stopped.values()),
            "stopped_cpu": sum(layout.cpu[n] for names in stopped.values() for n in names),
            "create_to_first_stop_seconds": (round(min(stop_times), 2) if stop_times
                                             else None),
            "low_running_at_end": sum(1 for n in low if occupancy.running.get(n)),
            "ran_twice_at_once": len(occupancy.twice),
        }
