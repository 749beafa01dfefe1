"""What the fleet benchmark reads off the machine and the dispatcher, beside its watches.

- `usage`: the dispatcher's CPU (% of one core) over a quiet window, its resident memory,
  its open TCP connections and the API requests it made meanwhile (a per-worker task that
  polled faster than its probe interval would show here);
- `rss_mib` and `available_mib`: /proc's resident set of one process and the machine's
  available memory;
- `scheduling`: the dispatcher's own scheduling-pass metrics, to time one decision live;
- `burst`: claimed jobs created on the manager at once, each timed until its mirror is
  seen on a worker (like bench/dispatch's, under a name prefix of its own, so bursts of
  one run do not count each other's mirrors).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import (
    RESULTS,
    CpuMeter,
    JobWatch,
    RunningDispatcher,
    bounded,
    create_claimed,
    plane_pids,
    py_spy,
    wait_for,
)
from bench.memory_profile import MEMORY_PROFILE
from devkit.localcluster import LocalControlPlane
from dispatcher.kube.client import ClusterClient


def rss_mib(pid: int | None) -> float:
    if pid is None:
        return 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main_thread_schedule(pid: int) -> tuple[float, float]:
    """(seconds on a core, seconds runnable but waiting for one) of process `pid`'s main
    thread, where the dispatcher's event loop runs (/proc's schedstat)."""
    ran, waited, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(ran) / 1e9, int(waited) / 1e9


def tcp_connections(pid: int) -> int:
    """Established TCP connections of process `pid` (its sockets found in /proc/net/tcp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    established = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:
                established += 1
    return established


@contextmanager
def profiled(dispatcher: RunningDispatcher, name: str) -> Iterator[None]:
    """With BENCH_PROFILE set, py-spy samples the running dispatcher meanwhile (without
    pausing it) into bench/results/`name` as collapsed stacks; else nothing."""
    if not os.environ.get("BENCH_PROFILE"):
        yield
        return
    sampler = subprocess.Popen(
        [py_spy(), "record", "--pid", str(dispatcher.process.pid), "--rate", "100",
         "--nonblocking", "--format", "raw", "-o", str(RESULTS / name)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        sampler.send_signal(signal.SIGINT)
        sampler.wait(timeout=60)


async def memory_section(dispatcher: RunningDispatcher) -> None:
    """With BENCH_MEMORY set (the dispatcher under bench/memory_profile.py), one more
    section of what holds its memory, appended to bench/results/memory-profile.txt."""
    if not os.environ.get("BENCH_MEMORY"):
        return
    written = MEMORY_PROFILE.stat().st_size if MEMORY_PROFILE.exists() else 0
    dispatcher.process.send_signal(signal.SIGUSR2)
    await wait_for(lambda: MEMORY_PROFILE.exists() and MEMORY_PROFILE.stat().st_size > written,
                   timeout=300)


async def _metrics_text(port: int) -> str:
    async with aiohttp.ClientSession() as session, session.get(
            f"http://127.0.0.1:{port}/metrics") as response:
        return await response.text()


async def metrics(port: int) -> dict[str, float]:
    """The dispatcher's /metrics, summed by sample name (labels dropped)."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(await _metrics_text(port)):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


async def histogram(port: int, name: str, **labels: str) -> dict[float, float]:
    """The cumulative bucket counts (upper bound -> count) of the dispatcher's histogram
    `name`, summed over the series whose labels include `labels`."""
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(await _metrics_text(port)):
        for sample in family.samples:
            if (sample.name == f"{name}_bucket"
                    and labels.items() <= sample.labels.items()):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def share_within(before: dict[float, float], after: dict[float, float]
                 ) -> dict[str, float]:
    """Of the observations between two reads of a histogram: how many, and the share
    at or under each bucket's bound (as "<=0.25s": 0.97)."""
    total = after.get(float("inf"), 0.0) - before.get(float("inf"), 0.0)
    if total <= 0:
        return {"count": 0}
    return {"count": total, **{f"<={bound:g}s": round((count - before.get(bound, 0.0)) / total, 4)
                               for bound, count in sorted(after.items())
                               if bound != float("inf")}}


async def usage(dispatcher: RunningDispatcher, *, seconds: float) -> dict[str, Any]:
    """The dispatcher at rest for `seconds`: CPU, memory, connections, requests."""
    pid = dispatcher.process.pid
    before = await metrics(dispatcher.port)
    meter = CpuMeter({"dispatcher": pid})
    meter.start()
    await asyncio.sleep(seconds)
    cpu = meter.stop()["dispatcher"]
    after = await metrics(dispatcher.port)
    requests = (after.get("dispatcher_api_requests_total", 0.0)
                - before.get("dispatcher_api_requests_total", 0.0))
    return {"seconds": seconds, "cpu_percent": round(cpu / seconds * 100, 2),
            "rss_mib": rss_mib(pid), "tcp_connections": tcp_connections(pid),
            "api_requests_per_second": round(requests / seconds, 2)}


async def workers_active(dispatcher: RunningDispatcher) -> float:
    return (await metrics(dispatcher.port)).get("dispatcher_worker_active", 0.0)


@dataclass(frozen=True)
class Scheduling:
    passes: float
    seconds: float
    decisions: float

    @classmethod
    async def read(cls, dispatcher: RunningDispatcher) -> Scheduling:
        sums = await metrics(dispatcher.port)
        return cls(passes=sums.get("dispatcher_scheduling_pass_seconds_count", 0.0),
                   seconds=sums.get("dispatcher_scheduling_pass_seconds_sum", 0.0),
                   decisions=sums.get("dispatcher_scheduling_decisions_total", 0.0))

    def since(self, earlier: Scheduling) -> dict[str, float]:
        passes = max(self.passes - earlier.passes, 1.0)
        decisions = max(self.decisions - earlier.decisions, 1.0)
        seconds = self.seconds - earlier.seconds
        return {"passes": self.passes - earlier.passes,
                "pass_ms": round(seconds / passes * 1000, 2),
                "decision_us": round(seconds / decisions * 1e6, 2)}


@dataclass(frozen=True)
class Burst:
    names: list[str]
    dispatch: list[float]
    """Manager create answered -> mirror seen, seconds, per job."""
    drained: float
    cpu: dict[str, float]


async def burst(plane: LocalControlPlane, dispatcher: RunningDispatcher,
                manager: ClusterClient, watchers: dict[str, JobWatch], *, prefix: str,
                jobs: int, concurrency: int) -> Burst:
    cpu = CpuMeter({**plane_pids(plane), "dispatcher": dispatcher.process.pid})
    cpu.start()
    created_at: dict[str, float] = {}
    names = [f"{prefix}-{i:05d}" for i in range(jobs)]

    async def create(name: str) -> None:
        await create_claimed(manager, name)
        created_at[name] = time.monotonic()

    def seen() -> dict[str, float]:
        return {n: t for w in watchers.values() for n, t in w.added.items()
                if n in created_at}

    started = time.monotonic()
    await bounded(concurrency, [create(n) for n in names])
    await wait_for(lambda: len(seen()) >= jobs, timeout=max(180.0, jobs / 10))
    found = seen()
    return Burst(names=names, drained=max(found.values(), default=started) - started,
                 dispatch=[found[n] - created_at[n] for n in names if n in found],
                 cpu=cpu.stop())
