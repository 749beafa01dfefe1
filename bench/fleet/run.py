"""Fleet benchmark: one dispatcher, a manager and N lean workers on this machine.

    python -m bench fleet --workers 10,25,50

For each N, on a control plane of its own (the manager's API server as the other
benchmarks run it, on an etcd of its own as a management cluster has; N worker API
servers started lean, `LEAN_APISERVER_FLAGS`, sharing another etcd: no Trainer chain on
any worker, so mirrors are TrainJob objects and their statuses are patched as trainers
would, which is all the dispatcher sees of a worker):

1. the machine's cost of a worker: each API server's resident memory, etcd's;
2. `dispatcher run` (its defaults: probe every 10 s; client QPS raised as in every
   benchmark; workers lost after 10 s), once every worker is active: at rest for
   `idle_seconds` with no job (CPU % of a core, RSS, TCP connections, API requests/s);
3. a warm-up burst (their mirrors are what the status changes below patch), then a
   burst of `burst` jobs with mirror statuses patched at 50 a second meanwhile: placement
   throughput, create -> mirror p50/p99, status sync p50/p99 during the burst (a mirror's
   status patched -> the manager job shows it), manager writes per job, CPU by process;
4. at the largest N, a worker lost and back: its API server frozen (SIGSTOP) until its
   jobs are placed elsewhere (the time, less the 10 s timeout), then thawed until the
   dispatcher has it active again and has deleted the mirrors it no longer wants there;
5. `queued` jobs that each ask for a whole worker: they wait; at rest again (the slope of
   RSS per queued job), then small jobs one a second, each a scheduling pass over the
   whole queue: the dispatcher's own pass time per decision (its metrics);
6. the scheduler alone, in this process, over a grid of queue lengths (to 100,000) and
   worker counts (to 500, `CURVE_WORKERS`) (bench/fleet/decision.py): the curve of one
   decision.

Writes `bench/results/fleet.{json,md,png}` (bench/fleet/report.py). With BENCH_PROFILE
set, py-spy samples the dispatcher during the burst, the queueing and the live decisions
(`fleet-<N>w-{burst,queue,decisions}-profile.txt` beside them, collapsed stacks); each
size's dispatcher log is kept as `fleet-<N>w-bench-dispatcher.log`. With BENCH_MEMORY set,
the dispatcher runs under tracemalloc and bench/results/memory-profile.txt gets what
holds its memory at rest and with the queue, and what the burst and the queue added
(bench/memory_profile.py; tracing slows it, so its numbers are not a run's).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import dataclass
from typing import Any

from bench.dispatch import scenarios
from bench.fleet import measure
from bench.fleet.decision import decision_curve
from bench.harness import (
    NAMESPACE,
    RESULTS,
    JobWatch,
    RunningDispatcher,
    connect,
    create_claimed,
    percentiles,
    prepare,
    running_dispatcher,
    wait_for,
)
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.access import CRD_DIR
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource

LOST_TIMEOUT_SECONDS = 10.0
PROBE_SECONDS = 10.0
"""`workers.probeIntervalSeconds`: the dispatcher's default."""
DECISION_PROBES = 5
CURVE_WORKERS = (10, 50, 500)
"""The scheduler alone is timed at these worker counts too: the model goes to 500."""
START_AT_ONCE = 5
"""Worker API servers started together: 50 at once did not all get ready in 60 s here."""
READY_SECONDS = 300.0


@dataclass(frozen=True)
class Plan:
    burst: int
    queued: int
    status_sample: int
    idle_seconds: float
    concurrency: int


async def benchmark(*, sizes: list[int], plan: Plan) -> dict[str, Any]:
    runs = []
    for count in sizes:
        runs.append(await _one_size(count, plan, lose_one=count == max(sizes)))
        print(f"fleet: {count} workers measured: {json.dumps(runs[-1])}", flush=True)
    curve = decision_curve(queues=(1000, 5000, 20000, 100000),
                           workers=tuple(sorted(set(sizes) | set(CURVE_WORKERS))),
                           shapes=(8, 500))
    return {"plan": plan.__dict__, "sizes": runs, "decision_curve": curve}


async def _one_size(count: int, plan: Plan, *, lose_one: bool) -> dict[str, Any]:
    names = [f"worker-{i:02d}" for i in range(count)]
    async with LocalControlPlane() as plane:
        started = time.monotonic()
        await plane.start(["manager"], own_etcd=["manager"])  # workers share the other
        for first in range(0, len(names), START_AT_ONCE):  # 50 at once outrun 2 cores
            group = names[first:first + START_AT_ONCE]
            await plane.start(group, lean=group, crd_files=sorted(CRD_DIR.glob("*.yaml")),
                              ready_timeout=READY_SECONDS)
        startup = time.monotonic() - started
        machine = _machine(plane, names)
        clients = await connect(plane, concurrency=plan.concurrency)
        try:
            await prepare(clients)
            async with running_dispatcher(plane, names, under_profiler=False, overrides={
                    "workers": {"probeIntervalSeconds": PROBE_SECONDS,
                                "lostTimeoutSeconds": LOST_TIMEOUT_SECONDS}}) as dispatcher:
                result = await _measure(plane, dispatcher, clients, names, plan,
                                        lose_one=lose_one)
        finally:
            for client in clients.values():
                await client.close()
            _keep_log(count)
    machine["available_mib_at_the_end"] = measure.available_mib()
    return {"workers": count, "control_plane_start_seconds": round(startup, 1),
            "machine": machine, **result}


def _keep_log(count: int) -> None:
    """This size's dispatcher log, kept as `fleet-<N>w-bench-dispatcher.log` in
    bench/results (not committed): the next size's dispatcher writes over it."""
    source = RESULTS / "bench-dispatcher.log"
    if source.exists():
        shutil.copyfile(source, RESULTS / f"fleet-{count}w-{source.name}")


def _machine(plane: LocalControlPlane, names: list[str]) -> dict[str, Any]:
    workers = [measure.rss_mib(plane.clusters[n].apiserver.pid) for n in names]
    return {"worker_apiserver_rss_mib": round(sum(workers) / len(workers), 1),
            "worker_apiserver_rss_mib_max": max(workers),
            "manager_apiserver_rss_mib": measure.rss_mib(plane.clusters["manager"].apiserver.pid),
            "etcd_rss_mib": measure.rss_mib(plane.etcd.pid),
            "manager_etcd_rss_mib": measure.rss_mib(plane.own_etcds["manager"].pid),
            "available_mib": measure.available_mib()}


async def _measure(plane: LocalControlPlane, dispatcher: RunningDispatcher,
                   clients: dict[str, ClusterClient], names: list[str], plan: Plan, *,
                   lose_one: bool) -> dict[str, Any]:
    active = await wait_for_async(lambda: _all_active(dispatcher, len(names)), timeout=120)
    idle = await measure.usage(dispatcher, seconds=plan.idle_seconds)
    await measure.memory_section(dispatcher)
    watchers = {w: JobWatch(clients[w], NAMESPACE) for w in names}
    manager_watch = JobWatch(clients["manager"], NAMESPACE)
    try:
        await asyncio.gather(*(w.informer.synced.wait() for w in watchers.values()),
                             manager_watch.informer.synced.wait())
        manager = clients["manager"]
        warm = await measure.burst(plane, dispatcher, manager, watchers, prefix="warm",
                                   jobs=plan.status_sample, concurrency=plan.concurrency)
        before = await measure.metrics(dispatcher.port)
        sync_before, patch_before, urgent_before = await _sync_histograms(dispatcher)
        ran_before, waited_before = measure.main_thread_schedule(dispatcher.process.pid)
        status_task = asyncio.create_task(scenarios.status_sync(
            clients, watchers, manager_watch, warm.names))
        with measure.profiled(dispatcher, f"fleet-{len(names)}w-burst-profile.txt"):
            main = await measure.burst(plane, dispatcher, manager, watchers, prefix="job",
                                       jobs=plan.burst, concurrency=plan.concurrency)
        status = await status_task
        after = await measure.metrics(dispatcher.port)
        sync_after, patch_after, urgent_after = await _sync_histograms(dispatcher)
        ran_after, waited_after = measure.main_thread_schedule(dispatcher.process.pid)
        lost = (await _lose_and_return(plane, dispatcher, clients, watchers, names[0])
                if lose_one else None)
        queued_at = time.monotonic()
        with measure.profiled(dispatcher, f"fleet-{len(names)}w-queue-profile.txt"):
            queued = await scenarios.queue_waiting_jobs(dispatcher, manager,
                                                        count=plan.queued,
                                                        concurrency=plan.concurrency)
        queue_seconds = time.monotonic() - queued_at
        with_queue = await measure.usage(dispatcher, seconds=plan.idle_seconds)
        await measure.memory_section(dispatcher)
        with measure.profiled(dispatcher, f"fleet-{len(names)}w-decisions-profile.txt"):
            live = await _live_decisions(dispatcher, manager)
    finally:
        for watcher in (*watchers.values(), manager_watch):
            await watcher.stop()
    requests = (after.get("dispatcher_api_requests_total", 0.0)
                - before.get("dispatcher_api_requests_total", 0.0))
    return {
        "all_workers_active": active, "idle": idle,
        "burst": {"jobs": len(main.dispatch),
                  "jobs_per_second": round(len(main.dispatch) / main.drained, 1)
                  if main.drained else 0.0,
                  "dispatch_latency": percentiles(main.dispatch),
                  "status_sync_during_burst": percentiles(status),
                  "status_changes": len(status),
                  "status_sync_inside_dispatcher": measure.share_within(sync_before,
                                                                        sync_after),
                  "manager_patch_latency": measure.share_within(patch_before, patch_after),
                  "urgent_queue_wait": measure.share_within(urgent_before, urgent_after),
                  "event_loop_seconds": {"ran": round(ran_after - ran_before, 1),
                                         "waited_for_a_core": round(
                                             waited_after - waited_before, 1)},
                  "api_requests_per_job": round(requests / max(len(main.dispatch), 1), 2),
                  "cpu_seconds": main.cpu},
        "worker_lost": lost,
        "queued": {"jobs": plan.queued, "all_waiting": queued,
                   "seconds_to_queue": round(queue_seconds, 1), "at_rest": with_queue,
                   "rss_kib_per_queued_job": round(
                       (with_queue["rss_mib"] - idle["rss_mib"]) * 1024
                       / max(plan.queued + plan.burst + plan.status_sample, 1), 2),
                   "live_decisions": live},
    }


async def wait_for_async(check: Any, *, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.5)
    return False


async def _all_active(dispatcher: RunningDispatcher, count: int) -> bool:
    return await measure.workers_active(dispatcher) >= count


async def _sync_histograms(dispatcher: RunningDispatcher
                           ) -> tuple[dict[float, float], dict[float, float], dict[float, float]]:
    """The dispatcher's own status-sync latency (a mirror's change seen -> the manager's
    status written), its manager PATCH latency and the wait of its urgent lane (news
    about placed jobs), to split the burst's status sync."""
    port = dispatcher.port
    return (await measure.histogram(port, "dispatcher_status_sync_latency_seconds"),
            await measure.histogram(port, "dispatcher_api_request_duration_seconds",
                                    cluster="manager", verb="patch"),
            await measure.histogram(port, "dispatcher_workqueue_queue_duration_seconds",
                                    lane="urgent"))


async def _live_decisions(dispatcher: RunningDispatcher, manager: ClusterClient
                          ) -> dict[str, float]:
    """Small jobs one a second: each makes a pass over the whole queue."""
    earlier = await measure.Scheduling.read(dispatcher)
    for index in range(DECISION_PROBES):
        await create_claimed(manager, f"probe-{index}")
        await asyncio.sleep(1.0)
    return (await measure.Scheduling.read(dispatcher)).since(earlier)


async def _lose_and_return(plane: LocalControlPlane, dispatcher: RunningDispatcher,
                           clients: dict[str, ClusterClient], watchers: dict[str, JobWatch],
                           victim: str) -> dict[str, Any]:
    """Freeze one worker's API server with its jobs on it; time their move elsewhere, then
    its return (active again, its mirrors that moved deleted by the garbage collector)."""
    on_it = sorted(watchers[victim].added)
    others = {w: watcher for w, watcher in watchers.items() if w != victim}
    cluster = plane.clusters[victim]
    cluster.pause()
    frozen = time.monotonic()

    def moved() -> dict[str, float]:
        return {n: t for w in others.values() for n, t in w.added.items() if n in on_it}

    moved_all = await wait_for(lambda: len(moved()) >= len(on_it),
                               timeout=LOST_TIMEOUT_SECONDS + 180)
    placed = [t - frozen for t in moved().values()]
    cluster.resume()
    thawed = time.monotonic()
    back = await wait_for_async(lambda: _all_active(dispatcher, len(watchers)), timeout=120)
    active_after = time.monotonic() - thawed

    async def emptied() -> bool:
        listed = await Resource(clients[victim], TRAINJOBS).list(namespace=NAMESPACE)
        return not listed["items"]

    collected = await wait_for_async(emptied, timeout=180)
    return {"jobs_on_it": len(on_it), "all_moved": moved_all,
            "lost_timeout_seconds": LOST_TIMEOUT_SECONDS,
            "requeued_after_seconds": percentiles(placed),
            "active_again_seconds": round(active_after, 1) if back else None,
            "stale_mirrors_deleted_seconds": (round(time.monotonic() - thawed, 1)
                                              if collected else None)}
