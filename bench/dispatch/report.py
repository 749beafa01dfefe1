"""The dispatch benchmark's reports: `bench/results/dispatch-<N>.json`, `.md` and `.png`.

The JSON is the result of `bench.dispatch.benchmark` without the raw latency lists (its
keys stay put so results of different runs compare); the markdown is a table of it, the
CPU per job of every process and the status page's response times and sizes; the PNG is
the distribution of every latency list (it needs matplotlib, the `bench` extra).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.dispatch.scenarios import STATUS_RATE
from bench.harness import DISPATCHER_CLIENT, RESULTS
from dispatcher.observability.statuspage import CACHE_SECONDS

LATENCY_LISTS = {
    ("floor", "latencies"): "floor: create on worker",
    ("dispatcher", "latencies"): "dispatcher: manager create -> mirror",
    ("dispatcher", "steady_latencies"): "dispatcher: same, steady rate",
    ("dispatcher", "status_latencies"): "dispatcher: status sync",
    ("dispatcher", "status_busy_latencies"): "dispatcher: status sync, during a burst",
}
"""Raw latencies (seconds) in a result, drawn in the PNG and left out of the JSON."""
PAGE_MOMENTS = {"after_burst": "after the burst", "with_waiting": "at the end, jobs waiting"}
"""When each status page measurement was taken, by its key in the result."""


def cpu_ceiling(floor: dict[str, Any], dispatched: dict[str, Any], jobs: int) -> float:
    """The throughput ratio a dispatcher costing no CPU at all could reach here.

    Both runs saturate the same cores, so throughput goes as 1 / CPU per job: the floor's
    CPU per job over the API servers', etcd's and the harness's CPU per dispatched job.
    """
    floor_cpu = floor["cpu_seconds"]["total"] / jobs
    others = dispatched["cpu_seconds"]["total"] - dispatched["cpu_seconds"]["dispatcher"]
    return round(float(floor_cpu / (others / max(dispatched["jobs_placed"], 1))), 2)


def _triple(latency: dict[str, float]) -> str:
    return f"{latency.get('p50_ms')}/{latency.get('p95_ms')}/{latency.get('p99_ms')}"


def _pair(latency: dict[str, float]) -> str:
    return f"{latency.get('p50_ms')}/{latency.get('p99_ms')}"


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


def measure_rows(result: dict[str, Any]) -> list[str]:
    """The main table: the floor beside the dispatcher, one measure a row."""
    d, f = result["dispatcher"], result["floor"]
    steady, busy = d["steady_dispatch"], d["status_sync_during_burst"]
    return [
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


def status_page_rows(dispatched: dict[str, Any]) -> list[str]:
    """One row per status page measurement: after the burst, then with jobs waiting."""
    rows = ["| when | jobs tracked | waiting | /api/status p50/p99 ms, fresh view "
            "| reused view | /api/status bytes | / p50/p99 ms | / bytes |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for when, page in dispatched.get("status_page", {}).items():
        rows.append(f"| {PAGE_MOMENTS.get(when, when)} | {page['jobs_tracked']} "
                    f"| {page['jobs_waiting']} "
                    f"| {_pair(page['api_status_fresh'])} | {_pair(page['api_status_reused'])} "
                    f"| {page['api_status_bytes']} | {_pair(page['html'])} "
                    f"| {page['html_bytes']} |")
    return rows


def markdown(result: dict[str, Any]) -> str:
    d, f = result["dispatcher"], result["floor"]
    pages: dict[str, Any] = d.get("status_page", {})
    requests = next((page["requests"] for page in pages.values()), "-")
    return (
        f"# Dispatch benchmark: {result['jobs']} jobs, {result['workers']} workers\n\n"
        f"Dispatcher settings: defaults, except client QPS/burst "
        f"{DISPATCHER_CLIENT['qps']}/{DISPATCHER_CLIENT['burst']}. "
        f"Harness concurrency {result['concurrency']}.\n\n"
        + "\n".join(measure_rows(result))
        + "\n\n## CPU per job, all processes on this machine\n\n"
        + "\n".join(cpu_rows(f, d, result["jobs"]))
        + f"\n\nA dispatcher using no CPU at all could reach {result['cpu_ceiling']}x the "
        "floor here: the API servers, etcd and the harness alone spend that much more CPU "
        "per dispatched job than per raw copy, on the same cores.\n"
        + "\n## Status page\n\n"
        f"{requests} GETs of each, one at a time, as a browser polls: after the burst, then "
        "with jobs that wait for quota added. A view is reused for "
        f"{CACHE_SECONDS:g} s: half the `/api/status` requests build a fresh one, half get "
        "the one just built. Sizes are the largest answer, in bytes.\n\n"
        + "\n".join(status_page_rows(d)) + "\n")


def plot(latencies: dict[str, list[float]], result: dict[str, Any], path: Path) -> None:
    """The cumulative distribution of each latency list, labelled, on a log scale."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (pip install -e '.[bench]'): no PNG", file=sys.stderr)
        return
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for label, values in latencies.items():
        if values:
            ordered = sorted(v * 1000 for v in values)
            axis.plot(ordered, [i / len(ordered) for i in range(len(ordered))], label=label)
    axis.set_xscale("log")
    axis.set_xlabel("latency (ms, log scale)")
    axis.set_ylabel("fraction of jobs")
    axis.set_title(f"{result['jobs']} TrainJobs, {result['workers']} workers")
    axis.legend()
    axis.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def write_reports(result: dict[str, Any]) -> Path:
    """Write the three reports; the latency lists leave `result`. Returns their stem."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"dispatch-{result['jobs']}"
    latencies = {label: result[part].pop(key)
                 for (part, key), label in LATENCY_LISTS.items()}
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    plot(latencies, result, stem.with_suffix(".png"))
    return stem
