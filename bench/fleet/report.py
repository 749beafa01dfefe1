"""The fleet benchmark's reports: `bench/results/fleet.json`, `.md` and `.png` (for
other worker counts than 10,25,50, `fleet-<counts>w.*`; with `--quick`, `fleet-quick.*`).

The JSON is `bench.fleet.run.benchmark`'s result; the markdown has one row per worker
count (the machine's cost of a worker, the dispatcher at rest, the burst, the queue),
the lost worker and the decision curve; the PNG draws the curve of one decision against
the queue's length, and the dispatcher's memory and idle CPU against the worker count.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.harness import RESULTS


def _pair(latency: dict[str, float]) -> str:
    return f"{latency.get('p50_ms', '-')} / {latency.get('p99_ms', '-')}"


def size_rows(result: dict[str, Any]) -> list[str]:
    rows = ["| workers | worker API server RSS (MiB) | dispatcher idle: CPU % / RSS MiB / "
            "TCP / requests/s | burst jobs/s | create -> mirror p50 / p99 ms | status sync "
            "during burst p50 / p99 ms | dispatcher requests per job | with the queue: CPU % "
            "/ RSS MiB | KiB per queued job | one decision, live (us) |",
            "| ---: | ---: | --- | ---: | --- | --- | ---: | --- | ---: | ---: |"]
    for size in result["sizes"]:
        idle, burst, queued = size["idle"], size["burst"], size["queued"]
        rest = queued["at_rest"]
        rows.append(
            f"| {size['workers']} | {size['machine']['worker_apiserver_rss_mib']} | "
            f"{idle['cpu_percent']} / {idle['rss_mib']} / {idle['tcp_connections']} / "
            f"{idle['api_requests_per_second']} | {burst['jobs_per_second']} | "
            f"{_pair(burst['dispatch_latency'])} | {_pair(burst['status_sync_during_burst'])} | "
            f"{burst['api_requests_per_job']} | {rest['cpu_percent']} / {rest['rss_mib']} | "
            f"{queued['rss_kib_per_queued_job']} | {queued['live_decisions']['decision_us']} |")
    return rows


def lost_rows(result: dict[str, Any]) -> list[str]:
    rows = []
    for size in result["sizes"]:
        lost = size.get("worker_lost")
        if not lost:
            continue
        requeued = lost["requeued_after_seconds"]
        rows.append(
            f"At {size['workers']} workers, one worker's API server frozen with "
            f"{lost['jobs_on_it']} jobs on it: placed elsewhere {requeued.get('p50_ms', '-')} "
            f"ms (p50) / {requeued.get('p99_ms', '-')} ms (p99) after the freeze, with "
            f"`workers.lostTimeoutSeconds: {lost['lost_timeout_seconds']:g}`; thawed, "
            f"active again after {lost['active_again_seconds']} s, the mirrors that moved "
            f"deleted there after {lost['stale_mirrors_deleted_seconds']} s.")
    return rows


def cpu_rows(result: dict[str, Any]) -> list[str]:
    """Where the machine's two cores went during each burst."""
    rows = ["| workers | burst s | dispatcher CPU s | manager API server | workers' API "
            "servers: sum / max | etcd (workers' / manager's) | all processes |",
            "| ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for size in result["sizes"]:
        cpu = size["burst"]["cpu_seconds"]
        workers = [v for k, v in cpu.items() if k.startswith("apiserver/worker")]
        jobs, rate = size["burst"]["jobs"], size["burst"]["jobs_per_second"]
        rows.append(
            f"| {size['workers']} | {round(jobs / rate, 1) if rate else '-'} | "
            f"{cpu.get('dispatcher', '-')} | {cpu.get('apiserver/manager', '-')} | "
            f"{round(sum(workers), 1)} / {max(workers, default=0)} | "
            f"{cpu.get('etcd', '-')} / {cpu.get('etcd/manager', '-')} | "
            f"{cpu.get('total', '-')} |")
    return rows


def sync_rows(result: dict[str, Any]) -> list[str]:
    """The burst's status sync split: its p50 and p99 end to end (the
    harness: a mirror's status patched -> the manager job shows it), inside the
    dispatcher (its news seen -> the manager's status written), the wait of its urgent
    lane (every mirror's news, not only the sampled ones) and its manager PATCHes."""
    rows = ["| workers | end to end | inside the dispatcher <= 250 ms / 1 s | "
            "of it, the urgent lane's wait <= 250 ms / 1 s | manager PATCH <= 250 ms / 1 s | "
            "the event loop's thread: ran / waited for a core (s) |",
            "| ---: | --- | --- | --- | --- | --- |"]

    def shares(split: dict[str, float] | None) -> str:
        if not split or not split.get("count"):
            return "-"
        return f"{split['<=0.25s']:.1%} / {split['<=1s']:.1%} of {split['count']:.0f}"

    for size in result["sizes"]:
        burst = size["burst"]
        changes = burst.get("status_changes", 0)
        latency = burst["status_sync_during_burst"]
        loop = burst.get("event_loop_seconds", {})
        end_to_end = (f"p50 {latency.get('p50_ms', '-')} / p99 {latency.get('p99_ms', '-')} "
                      f"ms of {changes}")
        rows.append(f"| {size['workers']} | {end_to_end} | "
                    f"{shares(burst.get('status_sync_inside_dispatcher'))} | "
                    f"{shares(burst.get('urgent_queue_wait'))} | "
                    f"{shares(burst.get('manager_patch_latency'))} | "
                    f"{loop.get('ran', '-')} / {loop.get('waited_for_a_core', '-')} |")
    return rows


def curve_rows(result: dict[str, Any]) -> list[str]:
    rows = ["| job shapes | workers | queued | one pass (ms) | one decision (us) |",
            "| ---: | ---: | ---: | ---: | ---: |"]
    rows += [f"| {r['shapes']} | {r['workers']} | {r['queued']} | {r['pass_ms']} | "
             f"{r['decision_us']} |" for r in result["decision_curve"]]
    return rows


def markdown(result: dict[str, Any]) -> str:
    plan = result["plan"]
    return (
        f"# Fleet: one dispatcher, {', '.join(str(s['workers']) for s in result['sizes'])} "
        "lean workers\n\n"
        f"Burst of {plan['burst']} jobs (statuses of {plan['status_sample']} others patched "
        f"at 50/s meanwhile), then {plan['queued']} jobs queued; at rest for "
        f"{plan['idle_seconds']:g} s each time. Workers run no Trainer chain (lean API "
        "servers); see bench/fleet/run.py.\n\n"
        + "\n".join(size_rows(result)) + "\n\n" + "\n".join(lost_rows(result)) + "\n\n"
        "CPU during the burst, by process (seconds):\n\n" + "\n".join(cpu_rows(result))
        + "\n\n"
        "Status sync during the burst, split (end to end as the harness saw it; the "
        "dispatcher's own histograms for the rest):\n\n" + "\n".join(sync_rows(result))
        + "\n\n"
        "The scheduler alone (in the harness's process), every worker full so every job "
        "waits:\n\n" + "\n".join(curve_rows(result)) + "\n")


def plot(result: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (pip install -e '.[bench]'): no PNG", file=sys.stderr)
        return
    figure, (curve, cost) = plt.subplots(1, 2, figsize=(11, 4.5))
    for shapes in sorted({r["shapes"] for r in result["decision_curve"]}):
        for workers in sorted({r["workers"] for r in result["decision_curve"]}):
            rows = [r for r in result["decision_curve"]
                    if r["shapes"] == shapes and r["workers"] == workers]
            curve.plot([r["queued"] for r in rows], [r["decision_us"] for r in rows],
                       marker="o", label=f"{workers} workers, {shapes} shapes")
    curve.set_xscale("log")
    curve.set_yscale("log")
    curve.set_xlabel("jobs queued")
    curve.set_ylabel("one decision (us)")
    curve.set_title("scheduler: one decision")
    curve.legend(fontsize=7)
    sizes = result["sizes"]
    counts = [s["workers"] for s in sizes]
    cost.plot(counts, [s["idle"]["rss_mib"] for s in sizes], marker="o", label="RSS idle (MiB)")
    cost.plot(counts, [s["queued"]["at_rest"]["rss_mib"] for s in sizes], marker="o",
              label="RSS with the queue (MiB)")
    cost.set_xlabel("workers")
    cost.set_ylabel("MiB")
    cpu = cost.twinx()
    cpu.plot(counts, [s["idle"]["cpu_percent"] for s in sizes], marker="s", color="gray",
             label="idle CPU (% of a core)")
    cpu.set_ylabel("% of a core")
    cost.legend(loc="upper left", fontsize=7)
    cpu.legend(loc="lower right", fontsize=7)
    cost.set_title("the dispatcher's cost by worker count")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def write_reports(result: dict[str, Any], *, name: str = "fleet") -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / name
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    plot(result, stem.with_suffix(".png"))
    return stem
