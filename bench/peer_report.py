"""The peer benchmark's markdown: one column per system, ratios against the fair mode."""

from __future__ import annotations

from typing import Any

HEADLINE = "dispatcher-fair"


def _triple(latency: dict[str, float]) -> str:
    if not latency:
        return "-"
    return f"{latency['p50_ms']}/{latency['p95_ms']}/{latency['p99_ms']}"


def _best_peer(systems: dict[str, Any]) -> str | None:
    peers = [n for n, s in systems.items() if s["settings"]["kind"] == "multikueue"]
    return max(peers, key=lambda n: systems[n]["burst"]["jobs_per_second"], default=None)


def _rows(systems: dict[str, Any]) -> list[str]:
    names = list(systems)
    rows = ["| measure | " + " | ".join(names) + " |",
            "| --- |" + " --- |" * len(names)]

    def row(label: str, cell: Any) -> None:
        rows.append(f"| {label} | " + " | ".join(str(cell(systems[n])) for n in names) + " |")
    row("jobs running remotely / created",
        lambda s: f"{s['burst']['remote_running']}/{s['burst']['jobs_created']}"
        + (f" (capped at {s['burst']['window_seconds']} s)" if s["burst"]["capped"] else ""))
    row("placement throughput, jobs/s (remote running)",
        lambda s: s["burst"]["jobs_per_second"])
    row("create -> remote job exists p50/p95/p99 ms",
        lambda s: _triple(s["burst"]["create_to_remote"]))
    row("create -> remote job running p50/p95/p99 ms",
        lambda s: _triple(s["burst"]["create_to_remote_running"]))
    row("status sync p50/p95/p99 ms (synced/changed)",
        lambda s: f"{_triple(s['status_sync']['latency'])} "
        f"({s['status_sync']['synced']}/{s['status_sync']['changes']})")
    row("API writes per job, manager (+ events)",
        lambda s: f"{s['api_writes']['manager']['writes_per_job']} "
        f"(+ {s['api_writes']['manager']['events_per_job']})")
    row("API writes per job, workers (+ events)",
        lambda s: f"{s['api_writes']['workers']['writes_per_job']} "
        f"(+ {s['api_writes']['workers']['events_per_job']})")
    row("CPU ms per job, all processes", lambda s: s["cpu_ms_per_job"]["total"])
    row("CPU ms per job, controllers", lambda s: round(sum(
        v for k, v in s["cpu_ms_per_job"].items() if k.startswith(("kueue/", "dispatcher"))), 2))
    row("peak RSS MB, controllers", lambda s: ", ".join(
        f"{k} {v}" for k, v in s["controllers_peak_rss_mb"].items()))
    return rows


def _ratios(systems: dict[str, Any]) -> list[str]:
    peer = _best_peer(systems)
    if HEADLINE not in systems or peer is None:
        return []
    ours, theirs = systems[HEADLINE], systems[peer]

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.1f}x" if b else "-"

    def writes(system: dict[str, Any]) -> float:
        counts = system["api_writes"]
        return float(counts["manager"]["writes_per_job"] + counts["workers"]["writes_per_job"])
    running = "create_to_remote_running"
    throughput = ratio(ours["burst"]["jobs_per_second"], theirs["burst"]["jobs_per_second"])
    return [
        f"Headline (fair mode vs the best MultiKueue setting here, `{peer}`):",
        f"- throughput: {throughput} (target: at least 10x)",
        f"- create -> remote running p99: {ours['burst'][running].get('p99_ms')} ms vs "
        f"{theirs['burst'][running].get('p99_ms')} ms (target: at most 1/10)",
        f"- API writes per job, manager + workers: {writes(ours):.2f} vs "
        f"{writes(theirs):.2f} (target: at most half)",
        f"- status sync p99: {ours['status_sync']['latency'].get('p99_ms')} ms vs "
        f"{theirs['status_sync']['latency'].get('p99_ms')} ms (target: no worse)",
    ]


def _settings(systems: dict[str, Any]) -> list[str]:
    lines = ["## Settings", ""]
    for name, system in systems.items():
        lines.append(f"- `{name}`: {system['settings']}")
    return lines


def _cpu(systems: dict[str, Any]) -> list[str]:
    processes = sorted({p for s in systems.values() for p in s["cpu_ms_per_job"]} - {"total"})
    names = list(systems)
    lines = ["## CPU ms per remotely running job, by process (burst)", "",
             "| process | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for process in [*processes, "total"]:
        cells = [str(systems[n]["cpu_ms_per_job"].get(process, "-")) for n in names]
        lines.append(f"| {process} | " + " | ".join(cells) + " |")
    return lines


def markdown(result: dict[str, Any]) -> str:
    systems = result["systems"]
    parts = [
        f"# Peer benchmark: {result['jobs']} TrainJobs, {result['workers']} workers",
        "",
        "Same machine, same run, same jobs; each system on fresh clusters, in the order "
        f"shown. MultiKueue runs are capped at {result['peer_cap_seconds']:g} s and measured "
        "over that window. Times come from the harness's own watches.",
        "",
        *_rows(systems), "", *_ratios(systems), "", *_settings(systems), "", *_cpu(systems),
    ]
    return "\n".join(parts) + "\n"
