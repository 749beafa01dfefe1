"""Peer benchmark: the dispatcher beside Kueue's MultiKueue, same machine, same run.

    python -m bench peer [--quick]    # --quick: 200 jobs, 2 workers, 2 min

Each system of bench/peer/systems.py runs in turn on fresh clusters (bench/peer/env.py)
with the same N TrainJobs (queue-name label, `managedBy: kueue.x-k8s.io/multikueue`):
1. Burst: the N jobs are created on the manager (32 at a time) and timed from our own
   watches on every worker: when each remote copy first exists, and when it first runs
   (not suspended: admitted by the worker's Kueue, where there is one). A system that
   has not placed every job when its time cap runs out is measured over that window.
   Throughput = jobs running remotely / seconds until the last of them.
2. API writes per job during the burst, from each API server's own request counters
   (every client's writes; the harness's N creates are taken out), manager and workers
   apart; CPU seconds of every process over the burst; peak RSS of the controllers.
3. Status sync: for a sample of the running remote jobs, their status is patched on the
   worker as a trainer would, a few a second, each timed until the manager's job shows it.
4. Worker GETs per job, from the workers' request counters: MultiKueue's remote clients
   read without a cache, so these show how its rate-limited requests are spent.
Writes `bench/results/peer-multikueue-<N>-<K>w.json`, `.md` and `.png`; every Kueue log
and the dispatcher's to `bench/results/peer-<system>-<N>-<K>w-*.log`.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from bench.harness import (
    RESULTS,
    CpuMeter,
    JobWatch,
    bounded,
    paced_status_changes,
    percentiles,
    proc_peak_rss_mb,
    wait_for,
)
from bench.peer.env import NAMESPACE, QUEUE, Environment, System, environment
from bench.peer.measure import (
    READ_VERBS,
    WorkloadStages,
    api_writes,
    difference,
    dispatcher_api_latency,
    steps,
)
from bench.peer.systems import SYSTEMS, controllers
from devkit.factories import trainjob
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.resource import Resource

CONCURRENCY = 32
DISPATCHER_MIN_CAP_SECONDS = 300.0
DISPATCHER_MIN_RATE = 5.0
"""The time cap is for the systems behind a manager-side Kueue (MultiKueue, and the
dispatcher as its AdmissionCheck: the symmetric setting, under one cap); the standalone
dispatcher gets at least DISPATCHER_MIN_CAP_SECONDS, and long enough to finish the burst
at DISPATCHER_MIN_RATE jobs/s."""
SETTLE_SECONDS = 3.0
STATUS_RATE = 10.0
STATUS_TIMEOUT_SECONDS = 30.0


def plane_pids(env: Environment) -> dict[str, int]:
    pids = {"etcd": env.plane.etcd.pid}
    for name, cluster in env.plane.clusters.items():
        pids[f"apiserver/{name}"] = cluster.apiserver.pid
        if cluster.controller_manager is not None:
            pids[f"gc/{name}"] = cluster.controller_manager.pid
    return {n: p for n, p in pids.items() if p is not None}


async def _writes(env: Environment) -> dict[str, dict[str, float]]:
    return {n: await api_writes(cl) for n, cl in env.plane.clusters.items()}


async def _worker_reads(env: Environment) -> dict[str, float]:
    """GETs served by all the workers together, by resource."""
    total: dict[str, float] = {}
    for worker in env.workers:
        for resource, count in (await api_writes(env.plane.clusters[worker],
                                                 verbs=READ_VERBS)).items():
            total[resource] = total.get(resource, 0.0) + count
    return total


async def burst(env: Environment, watches: dict[str, JobWatch], *, jobs: int,
                cap_seconds: float, stages: WorkloadStages | None = None,
                worker_stages: list[WorkloadStages] | None = None) -> dict[str, Any]:
    created_at: dict[str, float] = {}
    jobs_api = Resource(env.clients["manager"], TRAINJOBS)

    async def create(index: int) -> None:
        name = f"job-{index:05d}"
        await jobs_api.create(trainjob(name, NAMESPACE, managed_by=MANAGED_BY_MULTIKUEUE,
                                       labels={c.LABEL_KUEUE_QUEUE: QUEUE}),
                              namespace=NAMESPACE)
        created_at[name] = time.monotonic()

    started = time.monotonic()
    await bounded(CONCURRENCY, [create(i) for i in range(jobs)])
    created_seconds = time.monotonic() - started

    def first(attribute: str) -> dict[str, float]:
        seen: dict[str, float] = {}
        for watch in watches.values():
            for name, at in getattr(watch, attribute).items():
                seen[name] = min(at, seen.get(name, at))
        return seen
    while len(first("running")) < jobs and time.monotonic() < started + cap_seconds:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    window = time.monotonic() - started
    remote, running = first("added"), first("running")
    last = max(running.values(), default=started) - started
    seconds = last if len(running) == jobs else window
    result: dict[str, Any] = {} if stages is None else {
        "manager_workload_steps": stages.summary(created_at, remote)}
    if worker_stages:
        result["worker_steps"] = steps(
            ["create", "remote_copy", "worker_workload", "worker_quota_reserved",
             "remote_running"],
            [created_at, remote, WorkloadStages.merged(worker_stages, "created"),
             WorkloadStages.merged(worker_stages, "QuotaReserved"), running])
    return {
        **result,
        "jobs_created": len(created_at), "create_seconds": round(created_seconds, 2),
        "window_seconds": round(window, 1), "capped": len(running) < jobs,
        "remote_created": len(remote), "remote_running": len(running),
        "jobs_per_second": round(len(running) / seconds, 2) if seconds else 0.0,
        "create_to_remote": percentiles(
            [remote[n] - created_at[n] for n in remote if n in created_at]),
        "create_to_remote_running": percentiles(
            [running[n] - created_at[n] for n in running if n in created_at]),
        "where": {n: w for w, watch in watches.items() for n in watch.running},
        "latencies": sorted(round(running[n] - created_at[n], 4) for n in running
                            if n in created_at),
    }


async def status_sync(env: Environment, manager_watch: JobWatch, where: dict[str, str], *,
                      sample: int) -> dict[str, Any]:
    """Patch the status of `sample` running remote jobs; time each until the manager."""
    names = sorted(where)[:sample]
    patched_at = await paced_status_changes(env.clients, where, manager_watch, names,
                                            namespace=NAMESPACE, rate=STATUS_RATE)
    seen = manager_watch.status_seen
    await wait_for(lambda: all(n in seen for n in names), timeout=STATUS_TIMEOUT_SECONDS)
    synced = [seen[n] - patched_at[n] for n in names if n in seen]
    return {"changes": len(names), "synced": len(synced), "rate_per_second": STATUS_RATE,
            "latency": percentiles(synced)}


def _per_job(writes: dict[str, float], jobs: int) -> dict[str, float]:
    events = writes.get("events", 0.0)
    return {"writes_per_job": round((sum(writes.values()) - events) / max(jobs, 1), 2),
            "events_per_job": round(events / max(jobs, 1), 2)}


def write_summary(env: Environment, before: dict[str, dict[str, float]],
                  after: dict[str, dict[str, float]], jobs: int, placed: int
                  ) -> dict[str, Any]:
    manager = difference(after["manager"], before["manager"])
    manager["trainjobs"] = manager.get("trainjobs", 0.0) - jobs  # the harness's creates
    workers: dict[str, float] = {}
    for worker in env.workers:
        for resource, count in difference(after[worker], before[worker]).items():
            workers[resource] = workers.get(resource, 0.0) + count
    return {"manager": {**_per_job(manager, placed), "by_resource": manager},
            "workers": {**_per_job(workers, placed), "by_resource": workers}}


async def run_system(system: System, *, jobs: int, workers: int, cap_seconds: float,
                     status_sample: int) -> dict[str, Any]:
    async with environment(system, workers=workers) as env, \
            controllers(env, log_name=f"{system.name}-{jobs}-{workers}w") as pids:
        watches = {w: JobWatch(env.clients[w], NAMESPACE, label="peer-bench") for w in env.workers}
        manager_watch = JobWatch(env.clients["manager"], NAMESPACE, label="peer-bench")
        # MultiKueue, or the dispatcher as the AdmissionCheck of the same manager Kueue:
        # the same manager-side stages recorded, under the same time cap.
        behind_kueue = system.manager_kueue is not None
        stages = WorkloadStages(env.clients["manager"], NAMESPACE) if behind_kueue else None
        worker_stages = ([WorkloadStages(env.clients[w], NAMESPACE) for w in env.workers]
                         if system.worker_kueue is not None else [])
        everyone: list[JobWatch | WorkloadStages] = [*watches.values(), manager_watch,
                                                     *worker_stages]
        everyone += [stages] if stages is not None else []
        await asyncio.gather(*(w.informer.synced.wait() for w in everyone))
        cpu = CpuMeter({**plane_pids(env), **pids})
        before, reads_before = await _writes(env), await _worker_reads(env)
        cpu.start()
        cap = (cap_seconds if behind_kueue
               else max(cap_seconds, DISPATCHER_MIN_CAP_SECONDS, jobs / DISPATCHER_MIN_RATE))
        placed = await burst(env, watches, jobs=jobs, cap_seconds=cap, stages=stages,
                             worker_stages=worker_stages)
        if env.dispatcher_port is not None:  # where the dispatcher's own calls wait
            placed["dispatcher_api_latency"] = await dispatcher_api_latency(
                env.dispatcher_port)
        cpu_used = cpu.stop()
        await asyncio.sleep(SETTLE_SECONDS)
        writes = write_summary(env, before, await _writes(env), jobs,
                               placed["remote_running"])
        reads = difference(await _worker_reads(env), reads_before)
        writes["worker_gets"] = {
            "per_job": round(sum(reads.values()) / max(placed["remote_running"], 1), 2),
            "by_resource": reads}
        where = placed.pop("where")
        status = await status_sync(env, manager_watch, where, sample=status_sample)
        rss = {n: round(proc_peak_rss_mb(p), 1) for n, p in pids.items()}
        for watch in everyone:
            await watch.stop()
    count = max(placed["remote_running"], 1)
    return {"settings": system.describe(), "burst": placed, "api_writes": writes,
            "status_sync": status, "cpu_seconds": cpu_used,
            "cpu_ms_per_job": {n: round(s / count * 1000, 2) for n, s in cpu_used.items()},
            "controllers_peak_rss_mb": rss}


async def peer_benchmark(*, jobs: int, workers: int, cap_seconds: float, status_sample: int,
                         systems: list[str]) -> dict[str, Any]:
    results = {}
    for name in systems:
        print(f"peer benchmark: {name} ...", flush=True)
        results[name] = await run_system(SYSTEMS[name], jobs=jobs, workers=workers,
                                         cap_seconds=cap_seconds, status_sample=status_sample)
        print(json.dumps({k: v for k, v in results[name]["burst"].items()
                          if k != "latencies"}), flush=True)
    return {"jobs": jobs, "workers": workers, "peer_cap_seconds": cap_seconds,
            "systems": results}


def write_peer_reports(result: dict[str, Any]) -> str:
    from bench.peer.report import markdown

    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"peer-multikueue-{result['jobs']}-{result['workers']}w"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    stem.with_suffix(".md").write_text(text)
    from bench.peer.plot import plot_burst

    plot_burst(result, stem.with_suffix(".png"))
    return text
