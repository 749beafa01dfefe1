"""Dispatch benchmark: the dispatcher against the raw-copy floor, in one run.

    python -m bench dispatch --jobs 2000 --workers 3        # or --quick

This module is the run's order and the result's shape; the scenarios are in
bench/dispatch/scenarios.py, the plumbing in bench/harness.py, the reports in
bench/dispatch/report.py.

1. Starts a local manager and K workers (real etcd + kube-apiserver), installs the
   runtime, and gives every worker enough quota; one TrainJob is created and deleted on
   every cluster first (an API server sets up a custom resource on its first request).
2. Floor: the same client library with the same concurrency creates the N TrainJobs
   directly on the workers, round robin, with no logic at all: the fastest any
   dispatcher can place them here.
3. Dispatcher: runs `dispatcher run` (its defaults, QPS raised) as a separate process,
   creates N claimed TrainJobs on the manager in a burst, and times from watch events:
   placement throughput, dispatch latency (manager create answered -> mirror seen on a
   worker), time to drain the burst. With the N jobs placed, the status page (`/api/status`
   and `/`) is timed and sized. Then, with every job in flight: new jobs at a steady
   rate (their dispatch latency), mirror statuses patched at a steady 50 a second as
   trainers would (each timed until the manager's status shows it), and the same status
   stream again during a second burst of new jobs. API writes and reconciles per job come
   from the dispatcher's own metrics. Last, jobs that each ask for a whole worker's quota
   are queued (they wait for quota) and the status page is timed again.
4. CPU seconds of every process (API servers, etcd, the harness, the dispatcher) are read
   from /proc for the floor and for the burst: the machine is shared, so they show where
   the time goes and how close to the floor any dispatcher could come here.
5. Writes `bench/results/dispatch-<N>.json`, a markdown table and a PNG of the latency
   distributions.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from bench.dispatch import scenarios
from bench.dispatch.report import cpu_ceiling
from bench.harness import (
    NAMESPACE,
    JobWatch,
    RunningDispatcher,
    Scrape,
    connect,
    percentiles,
    prepare,
    proc_peak_rss_mb,
    running_dispatcher,
    scrape,
)
from devkit.localcluster import LocalControlPlane
from dispatcher.kube.client import ClusterClient

SECOND_BURST_CAP = 2000
"""The second burst (and the jobs left waiting at the end) is the run's N, at most this."""


@dataclass(frozen=True)
class Plan:
    """How big each phase of one run is."""

    jobs: int
    concurrency: int
    status_sample: int
    steady_rate: float
    steady_jobs: int

    @property
    def second_burst(self) -> int:
        return min(self.jobs, SECOND_BURST_CAP)


@dataclass(frozen=True)
class Measured:
    """The dispatcher's raw measurements, phase by phase."""

    burst: scenarios.Burst
    placed: Scrape
    """/metrics once the burst is placed."""
    steady: list[float]
    status: list[float]
    status_busy: list[float]
    scrapes: tuple[Scrape, Scrape, Scrape]
    """/metrics before and after the status sync, and after it ran during a burst."""
    peak_rss_mb: float
    status_page: dict[str, Any]


async def benchmark(*, jobs: int, workers: int, concurrency: int, status_sample: int,
                    steady_rate: float, steady_jobs: int) -> dict[str, Any]:
    plan = Plan(jobs=jobs, concurrency=concurrency, status_sample=status_sample,
                steady_rate=steady_rate, steady_jobs=steady_jobs)
    names = [f"worker-{i}" for i in range(workers)]
    async with LocalControlPlane() as plane:
        started = time.monotonic()
        await plane.start(["manager", *names])
        startup = time.monotonic() - started
        clients = await connect(plane, concurrency=concurrency)
        try:
            await prepare(clients)
            floor = await scenarios.floor(plane, clients, names, jobs=jobs,
                                          concurrency=concurrency)
            async with running_dispatcher(plane, names) as dispatcher:
                dispatched = await _measure_dispatcher(plane, dispatcher, clients, names, plan)
        finally:
            for client in clients.values():
                await client.close()
    return {"jobs": jobs, "workers": workers, "concurrency": concurrency,
            "control_plane_start_seconds": round(startup, 1), "floor": floor,
            "dispatcher": dispatched,
            "throughput_vs_floor": round(dispatched["jobs_per_second"]
                                         / max(floor["jobs_per_second"], 0.001), 2),
            "cpu_ceiling": cpu_ceiling(floor, dispatched, jobs)}


async def _measure_dispatcher(plane: LocalControlPlane, dispatcher: RunningDispatcher,
                              clients: dict[str, ClusterClient], workers: list[str],
                              plan: Plan) -> dict[str, Any]:
    watchers = {w: JobWatch(clients[w], NAMESPACE) for w in workers}
    manager_watch = JobWatch(clients["manager"], NAMESPACE)
    try:
        await asyncio.gather(*(w.informer.synced.wait() for w in watchers.values()),
                             manager_watch.informer.synced.wait())
        measured = await _phases(plane, dispatcher, clients, watchers, manager_watch, plan)
    finally:
        for watcher in (*watchers.values(), manager_watch):
            await watcher.stop()
    return _dispatcher_result(measured, plan)


async def _phases(plane: LocalControlPlane, dispatcher: RunningDispatcher,
                  clients: dict[str, ClusterClient], watchers: dict[str, JobWatch],
                  manager_watch: JobWatch, plan: Plan) -> Measured:
    manager = clients["manager"]
    burst = await scenarios.dispatcher_burst(plane, dispatcher, manager, watchers,
                                             jobs=plan.jobs, concurrency=plan.concurrency)
    await asyncio.sleep(1.0)
    placed = await scrape(dispatcher.port)
    page_after_burst = await scenarios.status_page(dispatcher)

    steady = await scenarios.steady_dispatch(manager, watchers, rate=plan.steady_rate,
                                             count=plan.steady_jobs)
    sample = min(plan.status_sample, len(burst.seen) // 2)
    quiet_names, busy_names = sorted(burst.seen)[:sample], sorted(burst.seen)[sample:2 * sample]
    before_status = await scrape(dispatcher.port)
    status = await scenarios.status_sync(clients, watchers, manager_watch, quiet_names)
    after_status = await scrape(dispatcher.port)
    status_busy = await scenarios.status_sync_during_burst(
        clients, watchers, manager_watch, busy_names, burst_jobs=plan.second_burst,
        concurrency=plan.concurrency)
    after_busy = await scrape(dispatcher.port)
    peak_rss = proc_peak_rss_mb(dispatcher.process.pid)

    await scenarios.queue_waiting_jobs(dispatcher, manager, count=plan.second_burst,
                                       concurrency=plan.concurrency)
    page_with_waiting = await scenarios.status_page(dispatcher)
    return Measured(burst=burst, placed=placed, steady=steady, status=status,
                    status_busy=status_busy, scrapes=(before_status, after_status, after_busy),
                    peak_rss_mb=peak_rss,
                    status_page={"after_burst": page_after_burst,
                                 "with_waiting": page_with_waiting})


def _dispatcher_result(m: Measured, plan: Plan) -> dict[str, Any]:
    before_status, after_status, after_busy = m.scrapes
    placed_jobs = max(len(m.burst.seen), 1)
    status_writes = sum(after_status.writes.values()) - sum(before_status.writes.values())
    dispatcher_side = ((after_busy.status_sync_seconds - after_status.status_sync_seconds)
                       / max(after_busy.status_syncs - after_status.status_syncs, 1))
    drained = m.burst.drained
    return {
        "jobs_placed": len(m.burst.seen),
        "jobs_per_second": round(len(m.burst.seen) / drained, 1) if drained else 0.0,
        "drain_seconds": round(drained, 2),
        "dispatch_latency": percentiles(m.burst.dispatch),
        "steady_dispatch": {"rate_per_second": plan.steady_rate, "jobs": len(m.steady),
                            "in_flight_before": len(m.burst.seen),
                            "latency": percentiles(m.steady)},
        "status_sync_latency": percentiles(m.status),
        "status_sync_during_burst": {
            "burst_jobs": plan.second_burst, "latency": percentiles(m.status_busy),
            "dispatcher_side_mean_ms": round(dispatcher_side * 1000, 1)},
        "cpu_seconds_per_1000_jobs": round(m.burst.cpu["dispatcher"] / placed_jobs * 1000, 2),
        "cpu_seconds": m.burst.cpu,
        "peak_rss_mb": round(m.peak_rss_mb, 1),
        "api_writes_per_job_to_placed": round(sum(m.placed.writes.values()) / placed_jobs, 2),
        "api_writes_per_status_change": round(status_writes / max(len(m.status), 1), 2),
        "events_per_job": round(m.placed.events / placed_jobs, 2),
        "reconciles_per_job": round(m.placed.reconciles / placed_jobs, 2),
        "api_writes_by_cluster": after_status.writes,
        "status_page": m.status_page,
        "latencies": m.burst.dispatch, "steady_latencies": m.steady,
        "status_latencies": m.status, "status_busy_latencies": m.status_busy,
    }
