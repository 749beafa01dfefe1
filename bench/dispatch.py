"""Dispatch benchmark: the dispatcher against the raw-copy floor, in one run.

    python -m bench --jobs 2000 --workers 3        # or --quick

1. Starts a local manager and K workers (real etcd + kube-apiserver), installs the
   runtime, and gives every worker enough quota; one TrainJob is created and deleted on
   every cluster first (an API server sets up a custom resource on its first request).
2. Floor: the same client library with the same concurrency creates the N TrainJobs
   directly on the workers, round robin, with no logic at all: the fastest any
   dispatcher can place them here.
3. Dispatcher: runs `dispatcher run` (its defaults, QPS raised) as a separate process,
   creates N claimed TrainJobs on the manager in a burst, and times from watch events:
   placement throughput, dispatch latency (manager create answered -> mirror seen on a
   worker), time to drain the burst. Then, with every job in flight: new jobs at a steady
   rate (their dispatch latency), mirror statuses patched at a steady 50 a second as
   trainers would (each timed until the manager's status shows it), and the same status
   stream again during a second burst of new jobs. API writes and reconciles per job come
   from the dispatcher's own metrics.
4. CPU seconds of every process (API servers, etcd, the harness, the dispatcher) are read
   from /proc for the floor and for the burst: the machine is shared, so they show where
   the time goes and how close to the floor any dispatcher could come here.
5. Writes `bench/results/dispatch-<N>.json`, a markdown table and a PNG of the latency
   distributions.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.informer import ADDED, MODIFIED, Informer
from dispatcher.kube.resource import NAMESPACES, Resource
from dispatcher.localcluster import LocalControlPlane
from dispatcher.localcluster.cluster import free_port
from tests.factories import trainjob

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
WRITE_VERBS = {"create", "patch", "apply", "delete"}
STATUS_RATE = 50.0
DISPATCHER_CLIENT = {"qps": 1000, "burst": 2000}
"""The dispatcher's settings are its defaults except this: per-cluster QPS raised from 200,
which a burst of ~150 jobs/s (a placement write and some events each) would reach."""


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)
    return {"p50_ms": at(0.50), "p95_ms": at(0.95), "p99_ms": at(0.99),
            "mean_ms": round(statistics.fmean(ordered) * 1000, 1)}


async def bounded(concurrency: int, coros: list[Any]) -> None:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(coro: Any) -> None:
        async with semaphore:
            await coro
    await asyncio.gather(*(one(c) for c in coros))


class Watcher:
    """Timestamps of the first time each TrainJob is seen (and a status predicate)."""

    def __init__(self, client: ClusterClient, namespace: str) -> None:
        self.informer = Informer(Resource(client, TRAINJOBS), namespace=namespace,
                                 name=f"bench/{client.name}")
        self.added: dict[str, float] = {}
        self.status_seen: dict[str, float] = {}
        self.expect_status: dict[str, Any] = {}
        self.informer.add_handler(self._on)
        self.task = asyncio.create_task(self.informer.run())

    def _on(self, event_type: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        name = obj["metadata"]["name"]
        if event_type == ADDED:
            self.added.setdefault(name, now)
        if event_type in (ADDED, MODIFIED) and name in self.expect_status:
            jobs_status = (obj.get("status") or {}).get("jobsStatus")
            if jobs_status == self.expect_status[name]:
                self.status_seen.setdefault(name, now)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


class CpuMeter:
    """CPU seconds each process of the run used between `start()` and `stop()`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._before: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def start(self) -> None:
        self._before = {name: proc_cpu_seconds(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        self.used = {name: round(proc_cpu_seconds(pid) - self._before[name], 2)
                     for name, pid in self.pids.items()}
        self.used["total"] = round(sum(self.used.values()), 2)
        return self.used


def plane_pids(plane: LocalControlPlane) -> dict[str, int]:
    pids = {"etcd": plane.etcd.pid, "harness": os.getpid()}
    pids.update({f"apiserver/{name}": c.apiserver.pid for name, c in plane.clusters.items()})
    return {name: pid for name, pid in pids.items() if pid is not None}


def proc_peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Scrape:
    """What the dispatcher's /metrics said at one moment."""

    writes: dict[str, float] = field(default_factory=dict)
    """State writes (create, patch, apply, delete) by cluster."""
    events: float = 0.0
    reconciles: float = 0.0
    status_sync_seconds: float = 0.0
    status_syncs: float = 0.0


async def scrape(port: int) -> Scrape:
    async with aiohttp.ClientSession() as session, session.get(
        f"http://127.0.0.1:{port}/metrics"
    ) as response:
        text = await response.text()
    result = Scrape()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dispatcher_reconciles_total":
                result.reconciles += sample.value
            elif sample.name == "dispatcher_status_sync_latency_seconds_sum":
                result.status_sync_seconds += sample.value
            elif sample.name == "dispatcher_status_sync_latency_seconds_count":
                result.status_syncs += sample.value
            elif sample.name == "dispatcher_api_requests_total":
                cluster, verb = sample.labels["cluster"], sample.labels["verb"]
                if verb in WRITE_VERBS:
                    result.writes[cluster] = result.writes.get(cluster, 0) + sample.value
                elif verb == "event":
                    result.events += sample.value
    return result


async def run_floor(plane: LocalControlPlane, clients: dict[str, ClusterClient],
                    workers: list[str], jobs: int, concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []

    async def create(index: int) -> None:
        worker = workers[index % len(workers)]
        started = time.monotonic()
        await Resource(clients[worker], TRAINJOBS).create(
            trainjob(f"floor-{index:05d}", "floor"), namespace="floor")
        latencies.append(time.monotonic() - started)

    cpu = CpuMeter(plane_pids(plane))
    cpu.start()
    started = time.monotonic()
    await bounded(concurrency, [create(i) for i in range(jobs)])
    elapsed = time.monotonic() - started
    return {"jobs_per_second": round(jobs / elapsed, 1), "seconds": round(elapsed, 2),
            "create_latency": percentiles(latencies), "cpu_seconds": cpu.stop(),
            "latencies": latencies}


async def run_dispatcher(plane: LocalControlPlane, clients: dict[str, ClusterClient],
                         workers: list[str], jobs: int, concurrency: int,
                         status_sample: int, steady_rate: float,
                         steady_jobs: int) -> dict[str, Any]:
    port = free_port()
    config = {
        "managerKubeconfig": str(plane.clusters["manager"].kubeconfig_path),
        "claim": {"namespaces": ["bench"]}, "mirror": {"origin": "bench"},
        "server": {"host": "127.0.0.1", "port": port},
        "client": DISPATCHER_CLIENT,
        "workers": {"fromCRD": False, "probeIntervalSeconds": 2, "static": [
            {"name": w, "kubeconfig": str(plane.clusters[w].kubeconfig_path),
             "quota": {"cpu": "1000000", "memory": "100000Ti"}} for w in workers]},
    }
    config_path = plane.directory / "bench-dispatcher.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log = (RESULTS / "bench-dispatcher.log").open("wb")
    argv = [sys.executable, "-m", "dispatcher", "run", "--config", str(config_path)]
    if os.environ.get("BENCH_PROFILE"):  # collapsed stacks of the dispatcher, via py-spy
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        argv = [py_spy, "record", "--format", "raw", "--rate", "200", "-o",
                str(RESULTS / "profile.txt"), "--", *argv]
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, then only signalled
        argv, stdout=log, stderr=log)
    try:
        await wait_ready(port, process)
        watchers = {w: Watcher(clients[w], "bench") for w in workers}
        manager_watch = Watcher(clients["manager"], "bench")
        await asyncio.gather(*(w.informer.synced.wait() for w in watchers.values()),
                             manager_watch.informer.synced.wait())
        cpu = CpuMeter({**plane_pids(plane), "dispatcher": process.pid})
        cpu.start()
        created_at: dict[str, float] = {}

        async def create(index: int) -> None:
            name = f"job-{index:05d}"
            await create_claimed(clients["manager"], name)
            created_at[name] = time.monotonic()

        started = time.monotonic()
        await bounded(concurrency, [create(i) for i in range(jobs)])
        deadline = time.monotonic() + max(120.0, jobs / 20)
        while sum(len(w.added) for w in watchers.values()) < jobs:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        seen = {name: t for w in watchers.values() for name, t in w.added.items()}
        drained = max(seen.values(), default=started) - started
        dispatch = [seen[n] - created_at[n] for n in seen if n in created_at]
        cpu_burst = cpu.stop()
        await asyncio.sleep(1.0)
        placed = await scrape(port)

        steady = await _steady_dispatch(clients["manager"], watchers, rate=steady_rate,
                                        count=steady_jobs)
        sample = min(status_sample, len(seen) // 2)
        quiet_names, busy_names = sorted(seen)[:sample], sorted(seen)[sample:2 * sample]
        before_status = await scrape(port)
        status = await _status_sync(clients, watchers, manager_watch, quiet_names)
        after_status = await scrape(port)
        status_writes = sum(after_status.writes.values()) - sum(before_status.writes.values())

        # The same stream of status changes while a second burst of new jobs arrives:
        # news about running jobs must not wait behind the new jobs.
        second_burst = min(jobs, 2000)
        status_task = asyncio.create_task(
            _status_sync(clients, watchers, manager_watch, busy_names))
        await bounded(concurrency, [create_claimed(clients["manager"], f"second-{i:05d}")
                                    for i in range(second_burst)])
        status_busy = await status_task
        after_busy = await scrape(port)
        dispatcher_side = ((after_busy.status_sync_seconds - after_status.status_sync_seconds)
                           / max(after_busy.status_syncs - after_status.status_syncs, 1))
        result = {
            "jobs_placed": len(seen),
            "jobs_per_second": round(len(seen) / drained, 1) if drained else 0.0,
            "drain_seconds": round(drained, 2),
            "dispatch_latency": percentiles(dispatch),
            "steady_dispatch": {"rate_per_second": steady_rate, "jobs": len(steady),
                                "in_flight_before": len(seen),
                                "latency": percentiles(steady)},
            "status_sync_latency": percentiles(status),
            "status_sync_during_burst": {
                "burst_jobs": second_burst, "latency": percentiles(status_busy),
                "dispatcher_side_mean_ms": round(dispatcher_side * 1000, 1)},
            "cpu_seconds_per_1000_jobs": round(
                cpu_burst["dispatcher"] / max(len(seen), 1) * 1000, 2),
            "cpu_seconds": cpu_burst,
            "peak_rss_mb": round(proc_peak_rss_mb(process.pid), 1),
            "api_writes_per_job_to_placed": round(
                sum(placed.writes.values()) / max(len(seen), 1), 2),
            "api_writes_per_status_change": round(status_writes / max(len(status), 1), 2),
            "events_per_job": round(placed.events / max(len(seen), 1), 2),
            "reconciles_per_job": round(placed.reconciles / max(len(seen), 1), 2),
            "api_writes_by_cluster": after_status.writes,
            "latencies": dispatch, "steady_latencies": steady, "status_latencies": status,
            "status_busy_latencies": status_busy,
        }
        for watcher in (*watchers.values(), manager_watch):
            await watcher.stop()
        return result
    finally:
        process.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
        process.wait(timeout=30)
        log.close()


async def wait_ready(port: int, process: subprocess.Popen[bytes], *,
                     timeout: float = 60.0) -> None:
    """Until the dispatcher on `port` answers /readyz, or fail when its process exits."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the dispatcher exited (code {process.returncode})")
            try:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("the dispatcher did not become ready")


async def create_claimed(manager: ClusterClient, name: str) -> None:
    await Resource(manager, TRAINJOBS).create(
        trainjob(name, "bench", managed_by=MANAGED_BY_MULTIKUEUE), namespace="bench")


async def _steady_dispatch(manager: ClusterClient, watchers: dict[str, Watcher], *,
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
        return {n: t for w in watchers.values() for n, t in w.added.items() if n in created_at}
    deadline = time.monotonic() + 60
    while len(placed()) < len(created_at) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    seen = placed()
    return [seen[n] - created_at[n] for n in names if n in seen]


async def _status_sync(clients: dict[str, ClusterClient], watchers: dict[str, Watcher],
                       manager_watch: Watcher, names: list[str]) -> list[float]:
    """Patch mirror statuses as the trainer would; time until the manager shows them."""
    where = {name: w for w, watcher in watchers.items() for name in watcher.added}
    patched_at: dict[str, float] = {}

    async def patch(name: str) -> None:
        status = [{"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 0,
                   "suspended": 0}]
        manager_watch.expect_status[name] = status
        patched_at[name] = time.monotonic()
        await Resource(clients[where[name]], TRAINJOBS).merge_patch(
            name, {"status": {"jobsStatus": status}}, namespace="bench", subresource="status")

    # A steady stream of status changes (STATUS_RATE a second) while every job is in
    # flight, as trainers report: the latency of each, not the drain time of a burst.
    tasks = []
    for name in names:
        tasks.append(asyncio.create_task(patch(name)))
        await asyncio.sleep(1 / STATUS_RATE)
    await asyncio.gather(*tasks)
    deadline = time.monotonic() + 60
    while len(manager_watch.status_seen) < len(names) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    return [manager_watch.status_seen[n] - patched_at[n]
            for n in names if n in manager_watch.status_seen]


async def benchmark(*, jobs: int, workers: int, concurrency: int, status_sample: int,
                    steady_rate: float, steady_jobs: int) -> dict[str, Any]:
    names = [f"worker-{i}" for i in range(workers)]
    async with LocalControlPlane() as plane:
        started = time.monotonic()
        await plane.start(["manager", *names])
        startup = time.monotonic() - started
        clients = {n: await ClusterClient.from_kubeconfig(
            name=n, kubeconfig=c.kubeconfig(),
            settings=ClientSettings(qps=5000, burst=5000, timeout_seconds=30,
                                    pool_size=concurrency))
            for n, c in plane.clusters.items()}
        try:
            runtime = yaml.safe_load(
                (ROOT / "config/samples/clustertrainingruntime-torch.yaml").read_text())
            for client in clients.values():
                await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(runtime,
                                                                        field_manager="bench")
                for ns in ("floor", "bench"):
                    await Resource(client, NAMESPACES).create({"metadata": {"name": ns}})
            for client in clients.values():
                # An API server sets up serving a custom resource on its first request to
                # it (~2 s for TrainJobs): not part of anyone's throughput.
                jobs_api = Resource(client, TRAINJOBS)
                await jobs_api.create(trainjob("warm-up", "floor"), namespace="floor")
                await jobs_api.delete("warm-up", namespace="floor")
            floor = await run_floor(plane, clients, names, jobs, concurrency)
            dispatched = await run_dispatcher(plane, clients, names, jobs, concurrency,
                                              status_sample, steady_rate, steady_jobs)
        finally:
            for client in clients.values():
                await client.close()
    return {"jobs": jobs, "workers": workers, "concurrency": concurrency,
            "control_plane_start_seconds": round(startup, 1), "floor": floor,
            "dispatcher": dispatched,
            "throughput_vs_floor": round(dispatched["jobs_per_second"]
                                         / max(floor["jobs_per_second"], 0.001), 2),
            "cpu_ceiling": cpu_ceiling(floor, dispatched, jobs)}


def _triple(latency: dict[str, float]) -> str:
    return f"{latency.get('p50_ms')}/{latency.get('p95_ms')}/{latency.get('p99_ms')}"


def cpu_ceiling(floor: dict[str, Any], dispatched: dict[str, Any], jobs: int) -> float:
    """The throughput ratio a dispatcher costing no CPU at all could reach here.

    Both runs saturate the same cores, so throughput goes as 1 / CPU per job: the floor's
    CPU per job over the API servers', etcd's and the harness's CPU per dispatched job.
    """
    floor_cpu = floor["cpu_seconds"]["total"] / jobs
    others = dispatched["cpu_seconds"]["total"] - dispatched["cpu_seconds"]["dispatcher"]
    return round(floor_cpu / (others / max(dispatched["jobs_placed"], 1)), 2)


def cpu_rows(floor: dict[str, Any], dispatched: dict[str, Any], jobs: int) -> list[str]:
    """CPU milliseconds per job by process, floor run beside dispatcher burst."""
    names = [n for n in dispatched["cpu_seconds"] if n != "total"] + ["total"]
    rows = ["| process | floor ms/job | dispatcher ms/job |", "| --- | --- | --- |"]
    placed = max(dispatched["jobs_placed"], 1)
    for name in names:
        floor_ms = floor["cpu_seconds"].get(name)
        rows.append(f"| {name} | {'-' if floor_ms is None else round(floor_ms / jobs * 1000, 2)}"
                    f" | {round(dispatched['cpu_seconds'][name] / placed * 1000, 2)} |")
    return rows


def write_reports(result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"dispatch-{result['jobs']}"
    floor_latencies = result["floor"].pop("latencies")
    dispatch_latencies = result["dispatcher"].pop("latencies")
    steady_latencies = result["dispatcher"].pop("steady_latencies")
    status_latencies = result["dispatcher"].pop("status_latencies")
    status_busy_latencies = result["dispatcher"].pop("status_busy_latencies")
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    d, f = result["dispatcher"], result["floor"]
    steady, busy = d["steady_dispatch"], d["status_sync_during_burst"]
    rows = [
        "| measure | floor (raw copy) | dispatcher |", "| --- | --- | --- |",
        f"| TrainJobs/s | {f['jobs_per_second']} | {d['jobs_per_second']} "
        f"({result['throughput_vs_floor']}x) |",
        f"| latency p50/p95/p99 ms, burst | {_triple(f['create_latency'])} (create) | "
        f"{_triple(d['dispatch_latency'])} (manager create -> mirror) |",
        f"| dispatch latency p50/p95/p99 ms, {steady['rate_per_second']:g} jobs/s with "
        f"{steady['in_flight_before']} in flight | - | {_triple(steady['latency'])} |",
        f"| status sync p50/p95/p99 ms, {STATUS_RATE:g} changes/s | - | "
        f"{_triple(d['status_sync_latency'])} |",
        f"| same, during a burst of {busy['burst_jobs']} new jobs | - | "
        f"{_triple(busy['latency'])} (mean in the dispatcher: "
        f"{busy['dispatcher_side_mean_ms']}) |",
        f"| time to drain the burst s | {f['seconds']} | {d['drain_seconds']} |",
        f"| dispatcher CPU s per 1000 jobs | - | {d['cpu_seconds_per_1000_jobs']} |",
        f"| dispatcher peak RSS MB | - | {d['peak_rss_mb']} |",
        f"| API writes per job to placed (+ events) | 1 | "
        f"{d['api_writes_per_job_to_placed']} (+ {d['events_per_job']}) |",
        f"| API writes per status change | - | {d['api_writes_per_status_change']} |",
        f"| reconciles per job | - | {d['reconciles_per_job']} |",
    ]
    stem.with_suffix(".md").write_text(
        f"# Dispatch benchmark: {result['jobs']} jobs, {result['workers']} workers\n\n"
        f"Dispatcher settings: defaults, except client QPS/burst "
        f"{DISPATCHER_CLIENT['qps']}/{DISPATCHER_CLIENT['burst']}. "
        f"Harness concurrency {result['concurrency']}.\n\n"
        + "\n".join(rows)
        + "\n\n## CPU per job, all processes on this machine\n\n"
        + "\n".join(cpu_rows(f, d, result["jobs"]))
        + f"\n\nA dispatcher using no CPU at all could reach {result['cpu_ceiling']}x the "
        "floor here: the API servers, etcd and the harness alone spend that much more CPU "
        "per dispatched job than per raw copy, on the same cores.\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots(figsize=(8, 4.5))
        for values, label in ((floor_latencies, "floor: create on worker"),
                              (dispatch_latencies, "dispatcher: manager create -> mirror"),
                              (steady_latencies, "dispatcher: same, steady rate"),
                              (status_latencies, "dispatcher: status sync"),
                              (status_busy_latencies, "dispatcher: status sync, during a burst")):
            if values:
                ordered = sorted(v * 1000 for v in values)
                axis.plot(ordered, [i / len(ordered) for i in range(len(ordered))],
                          label=label)
        axis.set_xscale("log")
        axis.set_xlabel("latency (ms, log scale)")
        axis.set_ylabel("fraction of jobs")
        axis.set_title(f"{result['jobs']} TrainJobs, {result['workers']} workers")
        axis.legend()
        axis.grid(True, alpha=0.3)
        figure.tight_layout()
        figure.savefig(stem.with_suffix(".png"), dpi=100)
    except ImportError:
        print("matplotlib missing (pip install -e '.[bench]'): no PNG", file=sys.stderr)
    return stem
