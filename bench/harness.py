"""The benchmarks' shared plumbing: clusters, the dispatcher process, watches, meters.

Nothing here measures a scenario; it gives scenarios (bench/dispatch/scenarios.py, the peer
benchmark) what they time with and what they run against:
- `connect` and `prepare` make a client per local cluster and install what a TrainJob
  needs there (runtime, namespaces, a first TrainJob that makes the API server set up
  serving the custom resource);
- `running_dispatcher` starts `dispatcher run` as a separate process on the local
  clusters, waits until it is ready and stops it with SIGINT when the block ends;
- `JobWatch` keeps the first-seen times of TrainJobs from an Informer (added, running,
  an expected status);
- `CpuMeter`, `proc_peak_rss_mb` and `scrape` read CPU and memory from /proc and the
  dispatcher's own counters from its /metrics;
- `percentiles`, `bounded` and `wait_for` are the small helpers every scenario uses.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.access import free_port
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.informer import ADDED, MODIFIED, Informer
from dispatcher.kube.resource import NAMESPACES, Resource

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SAMPLE_RUNTIME = ROOT / "config" / "samples" / "clustertrainingruntime-torch.yaml"
NAMESPACE = "bench"
"""Where the dispatcher's jobs are created (and claimed) on the manager."""
FLOOR_NAMESPACE = "floor"
WRITE_VERBS = {"create", "patch", "apply", "delete"}
DISPATCHER_CLIENT = {"qps": 1000, "burst": 2000}
"""The dispatcher's settings are its defaults except this: per-cluster QPS raised from 200,
which a burst of ~150 jobs/s (a placement write and some events each) would reach."""
WORKER_QUOTA = {"cpu": "1000000", "memory": "100000Ti"}
"""Each worker's quota in the dispatcher's config: more than any run here places."""


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p95, p99 and mean of durations in seconds, as milliseconds."""
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)
    return {"p50_ms": at(0.50), "p95_ms": at(0.95), "p99_ms": at(0.99),
            "mean_ms": round(statistics.fmean(ordered) * 1000, 1)}


async def bounded(concurrency: int, coros: list[Any]) -> None:
    """Await all of `coros`, at most `concurrency` at a time."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(coro: Any) -> None:
        async with semaphore:
            await coro
    await asyncio.gather(*(one(c) for c in coros))


async def wait_for(condition: Callable[[], bool], *, timeout: float,
                   interval: float = 0.05) -> bool:
    """Poll `condition` until it holds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)
    return True


_TRAINJOB = TrainJobKind()


class JobWatch:
    """First-seen timestamps of the TrainJobs in one namespace of one cluster.

    `added`: first seen at all; `running`: first seen with `spec.suspend` not true
    (admitted by a worker's Kueue, or never suspended); `status_seen`: first seen with
    the `status.jobsStatus` put in `expect_status` for that name beforehand; `finished`:
    first seen with a true `Complete` or `Failed` condition, and which.
    """

    def __init__(self, client: ClusterClient, namespace: str, *, label: str = "bench") -> None:
        self.informer = Informer(Resource(client, TRAINJOBS), namespace=namespace,
                                 name=f"{label}/{client.name}")
        self.added: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.status_seen: dict[str, float] = {}
        self.expect_status: dict[str, Any] = {}
        self.finished: dict[str, tuple[float, str]] = {}
        self.informer.add_handler(self._on)
        self.task = asyncio.create_task(self.informer.run(), name=f"{label}/{client.name}")

    def _on(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type not in (ADDED, MODIFIED):
            return
        now = time.monotonic()
        name = obj["metadata"]["name"]
        self.added.setdefault(name, now)
        if not (obj.get("spec") or {}).get("suspend"):
            self.running.setdefault(name, now)
        expected = self.expect_status.get(name)
        status = obj.get("status") or {}
        if expected is not None and status.get("jobsStatus") == expected:
            self.status_seen.setdefault(name, now)
        if name not in self.finished:
            finished = _TRAINJOB.finished(status)
            if finished is not None:
                self.finished[name] = (now, finished["type"])

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


RUNNING_STATUS = [{"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 0,
                   "suspended": 0}]
"""The `status.jobsStatus` a trainer reports for a running one-node job."""


async def paced_status_changes(clients: dict[str, ClusterClient], where: dict[str, str],
                               manager_watch: JobWatch, names: list[str], *, namespace: str,
                               rate: float) -> dict[str, float]:
    """Patch each remote job's status to RUNNING_STATUS, `rate` a second, as trainers
    report: a steady stream while jobs are in flight, so each change is timed on its own
    rather than as the drain of a burst. `where` names each job's cluster in `clients`;
    `manager_watch` is told what to expect. Returns when each change was sent."""
    patched_at: dict[str, float] = {}

    async def patch(name: str) -> None:
        manager_watch.expect_status[name] = RUNNING_STATUS
        patched_at[name] = time.monotonic()
        await Resource(clients[where[name]], TRAINJOBS).merge_patch(
            name, {"status": {"jobsStatus": RUNNING_STATUS}}, namespace=namespace,
            subresource="status")

    tasks = []
    for name in names:
        tasks.append(asyncio.create_task(patch(name)))
        await asyncio.sleep(1 / rate)
    await asyncio.gather(*tasks, return_exceptions=True)
    return patched_at


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
    """Each etcd, every API server and this process, by name."""
    pids = {"etcd": plane.etcd.pid, "harness": os.getpid()}
    pids.update({f"etcd/{name}": etcd.pid for name, etcd in plane.own_etcds.items()})
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
    by_reason: dict[str, float] = field(default_factory=dict)
    """Claimed, unfinished jobs by their Dispatched reason."""
    pending: float = 0.0
    """Jobs in the dispatcher's queue."""


async def scrape(port: int) -> Scrape:
    async with aiohttp.ClientSession() as session, session.get(
        f"http://127.0.0.1:{port}/metrics"
    ) as response:
        text = await response.text()
    result = Scrape()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dispatcher_jobs_by_reason":
                result.by_reason[sample.labels["reason"]] = sample.value
            elif sample.name == "dispatcher_pending_jobs":
                result.pending = sample.value
            elif sample.name == "dispatcher_reconciles_total":
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


async def wait_ready(port: int, process: subprocess.Popen[bytes], *,
                     timeout: float = 180.0) -> None:
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


@dataclass(frozen=True)
class RunningDispatcher:
    process: subprocess.Popen[bytes]
    port: int
    """Where its /metrics and /readyz are served, on 127.0.0.1."""
    status_port: int
    """Where its status page is served, on 127.0.0.1."""


def py_spy() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def _dispatcher_argv(config_path: Path, *, under_profiler: bool) -> list[str]:
    """`dispatcher run`; with BENCH_MEMORY set, under tracemalloc (bench/memory_profile.py:
    each SIGUSR2 appends to bench/results/memory-profile.txt what holds its memory)."""
    module = "bench.memory_profile" if os.environ.get("BENCH_MEMORY") else "dispatcher"
    argv = [sys.executable, "-m", module, "run", "--config", str(config_path)]
    if under_profiler:  # collapsed stacks of the dispatcher, via py-spy
        argv = [py_spy(), "record", "--format", "raw", "--rate", "200", "-o",
                str(RESULTS / "profile.txt"), "--", *argv]
    return argv


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` laid over it, nested dictionaries merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = (merged(out[key], value) if isinstance(value, dict)
                    and isinstance(out.get(key), dict) else value)
    return out


@asynccontextmanager
async def running_dispatcher(plane: LocalControlPlane, workers: list[str], *,
                             overrides: dict[str, Any] | None = None,
                             under_profiler: bool | None = None,
                             ) -> AsyncIterator[RunningDispatcher]:
    """`dispatcher run` claiming NAMESPACE, the workers static with WORKER_QUOTA (and
    `overrides` laid over that configuration); its log goes to
    bench/results/bench-dispatcher.log. Ready when the block starts. Run under py-spy
    (bench/results/profile.txt) when `under_profiler`, by default when BENCH_PROFILE is
    set: then the process measured is py-spy's, with the dispatcher its child."""
    port, status_port = free_port(), free_port()
    config = {
        "managerKubeconfig": str(plane.clusters["manager"].kubeconfig_path),
        "claim": {"namespaces": [NAMESPACE]},
        "mirror": {"origin": "bench", "retainFinishedSeconds": 0},  # as MultiKueue: none kept
        "server": {"host": "127.0.0.1", "port": port, "statusPort": status_port,
                   "logsPort": 0},
        "client": DISPATCHER_CLIENT,
        "workers": {"fromCRD": False, "probeIntervalSeconds": 2, "static": [
            {"name": w, "kubeconfig": str(plane.clusters[w].kubeconfig_path),
             "quota": WORKER_QUOTA} for w in workers]},
    }
    config_path = plane.directory / "bench-dispatcher.yaml"
    config_path.write_text(yaml.safe_dump(merged(config, overrides or {})))
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = (RESULTS / "bench-dispatcher.log").open("wb")
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, then only signalled
        _dispatcher_argv(config_path, under_profiler=bool(os.environ.get("BENCH_PROFILE"))
                         if under_profiler is None else under_profiler),
        stdout=log, stderr=log)
    try:
        await wait_ready(port, process)
        yield RunningDispatcher(process=process, port=port, status_port=status_port)
    finally:
        process.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
        process.wait(timeout=30)
        log.close()


async def connect(plane: LocalControlPlane, *,
                  concurrency: int) -> dict[str, ClusterClient]:
    """A client per cluster of `plane`, with room for `concurrency` requests at once."""
    return {n: await ClusterClient.from_kubeconfig(
        name=n, kubeconfig=c.kubeconfig(),
        settings=ClientSettings(qps=5000, burst=5000, timeout_seconds=30,
                                pool_size=concurrency))
        for n, c in plane.clusters.items()}


async def prepare(clients: dict[str, ClusterClient]) -> None:
    """The torch runtime and both namespaces on every cluster, and one TrainJob created
    and deleted on each: an API server sets up serving a custom resource on its first
    request to it (~2 s for TrainJobs), which is not part of anyone's throughput."""
    runtime = yaml.safe_load(
        SAMPLE_RUNTIME.read_text())
    for client in clients.values():
        await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(runtime, field_manager="bench")
        for ns in (FLOOR_NAMESPACE, NAMESPACE):
            await Resource(client, NAMESPACES).create({"metadata": {"name": ns}})
    for client in clients.values():
        jobs_api = Resource(client, TRAINJOBS)
        await jobs_api.create(trainjob("warm-up", FLOOR_NAMESPACE), namespace=FLOOR_NAMESPACE)
        await jobs_api.delete("warm-up", namespace=FLOOR_NAMESPACE)


async def create_claimed(manager: ClusterClient, name: str, *,
                         resources_per_node: dict[str, Any] | None = None) -> None:
    """A TrainJob on the manager for the dispatcher (NAMESPACE, MultiKueue's managedBy)."""
    await Resource(manager, TRAINJOBS).create(
        trainjob(name, NAMESPACE, managed_by=MANAGED_BY_MULTIKUEUE,
                 resources_per_node=resources_per_node), namespace=NAMESPACE)

