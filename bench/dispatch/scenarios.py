"""What the dispatch benchmark times, one scenario per function, each from our own watches.

- `floor`: the N TrainJobs created straight on the workers, round robin, same client and
  concurrency, no logic at all: the fastest any dispatcher can place them here.
- `dispatcher_burst`: N claimed TrainJobs created on the manager at once; each job's
  dispatch latency (manager create answered -> mirror seen on a worker), the time until
  the last mirror, and the CPU every process used meanwhile.
- `steady_dispatch`: new jobs at a steady rate with the burst in flight, as users submit.
- `status_sync`: mirror statuses patched at a steady rate as trainers would, each timed
  until the manager's job shows it; `status_sync_during_burst` does the same while a
  second burst of new jobs arrives (news about running jobs must not wait behind them).
- `queue_waiting_jobs` and `status_page`: jobs that wait for quota, and the response time
  and size of the status page (`/api/status`, `/`) with every job tracked.

Scenarios get the clients, watches and the running dispatcher from the orchestration
(bench/dispatch/run.py) and return plain numbers; bench/harness.py has the plumbing.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.harness import (
    FLOOR_NAMESPACE,
    NAMESPACE,
    WORKER_QUOTA,
    CpuMeter,
    JobWatch,
    RunningDispatcher,
    bounded,
    create_claimed,
    paced_status_changes,
    percentiles,
    plane_pids,
    scrape,
    wait_for,
)
from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from dispatcher.api import constants as c
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource
from dispatcher.observability.statuspage import CACHE_SECONDS, DEFAULT_LIMIT

STATUS_RATE = 50.0
"""Status changes a second in the status-sync scenarios."""
PAGE_REQUESTS = 20
"""GETs of each status page endpoint per measurement: for `/api/status` half build a
fresh view, half get the one just built (a view is reused for CACHE_SECONDS)."""


async def floor(plane: LocalControlPlane, clients: dict[str, ClusterClient],
                workers: list[str], *, jobs: int, concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []

    async def create(index: int) -> None:
        worker = workers[index % len(workers)]
        started = time.monotonic()
        await Resource(clients[worker], TRAINJOBS).create(
            trainjob(f"floor-{index:05d}", FLOOR_NAMESPACE), namespace=FLOOR_NAMESPACE)
        latencies.append(time.monotonic() - started)

    cpu = CpuMeter(plane_pids(plane))
    cpu.start()
    started = time.monotonic()
    await bounded(concurrency, [create(i) for i in range(jobs)])
    elapsed = time.monotonic() - started
    return {"jobs_per_second": round(jobs / elapsed, 1), "seconds": round(elapsed, 2),
            "create_latency": percentiles(latencies), "cpu_seconds": cpu.stop(),
            "latencies": latencies}


@dataclass(frozen=True)
class Burst:
    seen: dict[str, float]
    """When each job's mirror was first seen on a worker (monotonic seconds)."""
    dispatch: list[float]
    """Manager create answered -> mirror seen, seconds, per job."""
    drained: float
    """Seconds from the first create to the last mirror seen."""
    cpu: dict[str, float]
    """CPU seconds by process over the burst."""


def _mirrors_seen(watchers: dict[str, JobWatch]) -> dict[str, float]:
    return {name: t for w in watchers.values() for name, t in w.added.items()}


async def dispatcher_burst(plane: LocalControlPlane, dispatcher: RunningDispatcher,
                           manager: ClusterClient, watchers: dict[str, JobWatch], *,
                           jobs: int, concurrency: int) -> Burst:
    cpu = CpuMeter({**plane_pids(plane), "dispatcher": dispatcher.process.pid})
    cpu.start()
    created_at: dict[str, float] = {}

    async def create(index: int) -> None:
        name = f"job-{index:05d}"
        await create_claimed(manager, name)
        created_at[name] = time.monotonic()

    started = time.monotonic()
    await bounded(concurrency, [create(i) for i in range(jobs)])
    await wait_for(lambda: sum(len(w.added) for w in watchers.values()) >= jobs,
                   timeout=max(120.0, jobs / 20))
    seen = _mirrors_seen(watchers)
    return Burst(seen=seen, drained=max(seen.values(), default=started) - started,
                 dispatch=[seen[n] - created_at[n] for n in seen if n in created_at],
                 cpu=cpu.stop())


async def steady_dispatch(manager: ClusterClient, watchers: dict[str, JobWatch], *,
                          rate: float, count: int) -> list[float]:
    """New jobs at a steady rate while the burst's jobs are in flight, as users submit:
    the dispatch latency of each (manager create answered -> mirror seen on a worker)."""
    created_at: dict[str, float] = {}

    async def create(name: str) -> None:
        await create_claimed(manager, name)
        created_at[name] = time.monotonic()

    names = [f"steady-{i:05d}" for i in range(count)]
    tasks = []
    started = time.monotonic()
    for index, name in enumerate(names):
        await asyncio.sleep(max(0.0, started + index / rate - time.monotonic()))
        tasks.append(asyncio.create_task(create(name)))
    await asyncio.gather(*tasks)

    def placed() -> dict[str, float]:
        return {n: t for n, t in _mirrors_seen(watchers).items() if n in created_at}
    await wait_for(lambda: len(placed()) >= len(created_at), timeout=60)
    seen = placed()
    return [seen[n] - created_at[n] for n in names if n in seen]


async def status_sync(clients: dict[str, ClusterClient], watchers: dict[str, JobWatch],
                      manager_watch: JobWatch, names: list[str]) -> list[float]:
    """Patch mirror statuses as the trainer would; time until the manager shows them."""
    where = {name: w for w, watcher in watchers.items() for name in watcher.added}
    patched_at = await paced_status_changes(clients, where, manager_watch, names,
                                            namespace=NAMESPACE, rate=STATUS_RATE)
    seen = manager_watch.status_seen
    await wait_for(lambda: len(seen) >= len(names), timeout=60)
    return [seen[n] - patched_at[n] for n in names if n in seen]


async def status_sync_during_burst(
        clients: dict[str, ClusterClient], watchers: dict[str, JobWatch],
        manager_watch: JobWatch, names: list[str], *, burst_jobs: int,
        concurrency: int) -> list[float]:
    """`status_sync` of `names` while `burst_jobs` new jobs are created on the manager."""
    status_task = asyncio.create_task(status_sync(clients, watchers, manager_watch, names))
    await bounded(concurrency, [create_claimed(clients["manager"], f"second-{i:05d}")
                                for i in range(burst_jobs)])
    return await status_task


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[float, bytes]:
    started = time.monotonic()
    async with session.get(url) as response:
        body = await response.read()
        response.raise_for_status()
    return time.monotonic() - started, body


def _api_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/api/status?offset=0&limit={DEFAULT_LIMIT}"


async def status_page(dispatcher: RunningDispatcher, *,
                      requests: int = PAGE_REQUESTS) -> dict[str, Any]:
    """Response times and sizes of the status page as a browser polls it, sequentially.

    `/api/status` is asked for in pairs, more than CACHE_SECONDS apart: the first of a
    pair builds a fresh view (every tracked job walked), the second gets it reused. The
    jobs tracked and waiting are the page's own counts, from the last answer.
    """
    fresh: list[float] = []
    reused: list[float] = []
    html: list[float] = []
    api_bytes = html_bytes = 0
    body = b""
    async with aiohttp.ClientSession() as session:
        for _ in range(requests // 2):
            await asyncio.sleep(CACHE_SECONDS + 0.1)  # the view made before has expired
            for latencies in (fresh, reused):
                seconds, body = await _get(session, _api_url(dispatcher.status_port))
                latencies.append(seconds)
                api_bytes = max(api_bytes, len(body))
        for _ in range(requests):
            seconds, page = await _get(session, f"http://127.0.0.1:{dispatcher.status_port}/")
            html.append(seconds)
            html_bytes = max(html_bytes, len(page))
    view = json.loads(body)
    return {"requests": requests,
            "jobs_tracked": sum(view["by_state"].values()),
            "jobs_waiting": view["queue"]["total"],
            "api_status_fresh": percentiles(fresh), "api_status_reused": percentiles(reused),
            "api_status_bytes": api_bytes,
            "html": percentiles(html), "html_bytes": html_bytes}


async def queue_waiting_jobs(dispatcher: RunningDispatcher, manager: ClusterClient, *,
                             count: int, concurrency: int) -> bool:
    """`count` jobs that each ask for a whole worker's quota: none fits beside the jobs
    already placed, so every one waits for quota in the dispatcher's queue. True once
    its metrics count them all as WaitingForQuota, or every job still queued (a worker
    freed meanwhile may take one: a worker lost and back, in the fleet); False if that
    takes too long. The metrics, not the status page: the waiting builds no pages."""
    demand = {"requests": {"cpu": WORKER_QUOTA["cpu"], "memory": "1Gi"}}
    await bounded(concurrency, [create_claimed(manager, f"waiting-{i:05d}",
                                               resources_per_node=demand)
                                for i in range(count)])
    deadline = time.monotonic() + max(60.0, count / 20)
    while time.monotonic() < deadline:
        read = await scrape(dispatcher.port)
        waiting = read.by_reason.get(c.REASON_WAITING_FOR_QUOTA, 0)
        if waiting >= count or (waiting >= read.pending >= count * 0.99):
            return True
        await asyncio.sleep(CACHE_SECONDS)
    return False
