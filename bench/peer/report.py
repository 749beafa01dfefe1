"""The peer benchmark's markdown: one column per system, ratios of our settings against
the best MultiKueue setting.

`markdown(result)` is a burst's table; `write_scenario_reports(results, ...)` writes the
behaviour scenarios' JSON, markdown (with their targets: nothing runs twice at once in
the worker-lost run, quota never exceeded, an urgent job runs stopping the fewest jobs)
and PNG.
"""

from __future__ import annotations

import json
from typing import Any

from bench.harness import RESULTS

HEADLINES = {
    "dispatcher-fair": "fair mode (no Kueue on the manager)",
    "dispatcher-check": "symmetric setting (the dispatcher as the AdmissionCheck behind the "
                        "same manager-side Kueue)",
}
"""Our settings that get a headline against the best MultiKueue setting of the run."""


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
    row("GETs per job served by the workers",
        lambda s: s["api_writes"].get("worker_gets", {}).get("per_job", "-"))
    row("CPU ms per job, all processes", lambda s: s["cpu_ms_per_job"]["total"])
    row("CPU ms per job, controllers", lambda s: round(sum(
        v for k, v in s["cpu_ms_per_job"].items() if k.startswith(("kueue/", "dispatcher"))), 2))
    row("peak RSS MB, controllers", lambda s: ", ".join(
        f"{k} {v}" for k, v in s["controllers_peak_rss_mb"].items()))
    return rows


def _ratios(systems: dict[str, Any]) -> list[str]:
    peer = _best_peer(systems)
    if peer is None:
        return []
    lines: list[str] = []
    for name, setting in HEADLINES.items():
        if name in systems:
            lines += [*_headline(systems[name], systems[peer], f"{setting} vs the best "
                                 f"MultiKueue setting here, `{peer}`"), ""]
    return lines[:-1]


def _headline(ours: dict[str, Any], theirs: dict[str, Any], title: str) -> list[str]:
    def ratio(a: float, b: float) -> str:
        return f"{a / b:.1f}x" if b else "-"

    def writes(system: dict[str, Any]) -> float:
        counts = system["api_writes"]
        return float(counts["manager"]["writes_per_job"] + counts["workers"]["writes_per_job"])
    running = "create_to_remote_running"
    throughput = ratio(ours["burst"]["jobs_per_second"], theirs["burst"]["jobs_per_second"])
    return [
        f"Headline, {title}:",
        f"- throughput: {throughput} (target: at least 10x)",
        f"- create -> remote running p99: {ours['burst'][running].get('p99_ms')} ms vs "
        f"{theirs['burst'][running].get('p99_ms')} ms (target: at most 1/10)"
        + _censored(theirs["burst"]),
        f"- API writes per job, manager + workers: {writes(ours):.2f} vs "
        f"{writes(theirs):.2f} (target: at most half)",
        f"- status sync p99: {_sync_p99(ours)} vs {_sync_p99(theirs)} (target: no worse)",
    ]


def _sync_p99(system: dict[str, Any]) -> str:
    sync = system["status_sync"]
    p99 = sync["latency"].get("p99_ms")
    if p99 is None:
        return f"none of {sync['changes']} synced"
    return f"{p99} ms ({sync['synced']}/{sync['changes']} synced)"


def _censored(burst: dict[str, Any]) -> str:
    """What a capped run's p99 leaves out: the jobs still waiting when the window closed."""
    if not burst["capped"]:
        return ""
    jobs, ran, rate = burst["jobs_created"], burst["remote_running"], burst["jobs_per_second"]
    projection = (f"; at {rate} jobs/s all {jobs} would take about {jobs / rate:.0f} s"
                  if rate else "")
    return (f"; MultiKueue's p99 is of the {ran} of {jobs} jobs that ran in its window, the "
            f"other {jobs - ran} still waited{projection}")


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


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
    return "-" if value is None else str(value)


def _scenario_table(title: str, systems: dict[str, Any], rows: list[tuple[str, Any]]
                    ) -> list[str]:
    names = list(systems)
    lines = [f"## {title}", "", "| measure | " + " | ".join(names) + " |",
             "| --- |" + " --- |" * len(names)]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(_cell(cell(systems[n])) for n in names)
                     + " |")
    return lines


def _frozen(systems: dict[str, Any]) -> list[str]:
    lines = _scenario_table("A worker's API server frozen past the lost timeout", systems, [
        ("jobs (all running before the freeze)",
         lambda r: f"{r['jobs']} ({r['all_running_before_freeze']})"),
        ("lost timeout s", lambda r: r["lost_timeout_seconds"]),
        ("a lost worker's jobs", lambda r: {"Wait": "kept there (whenLost: Wait)"}.get(
            r.get("when_lost", ""), "requeued")),
        ("jobs on the frozen worker / moved", lambda r: f"{r['jobs_on_frozen_worker']}/"
                                                        f"{r['moved']}"),
        ("... still running there after the thaw",
         lambda r: r.get("still_running_on_frozen_worker_after_thaw", "-")),
        ("freeze -> running elsewhere p50/max s", lambda r: "/".join(
            str(v) for v in r["freeze_to_running_elsewhere"].values()) or "-"),
        ("frozen for s", lambda r: r["frozen_seconds"]),
        ("jobs ever on two workers at once (frozen copies counted as running)",
         lambda r: r["ran_twice_at_once"]),
        ("... of them still on two workers at or after the thaw",
         lambda r: r["ran_twice_at_once_after_thaw"]),
        ("thaw -> no job on two workers s",
         lambda r: f"{r['thaw_to_no_job_on_two_workers_seconds']}"
                   + ("" if r["stale_copies_gone"] else
                      f" (timed out, {r['still_on_two_workers']} left)")),
    ])
    verdicts = [f"- `{n}`: " + ("nothing ran twice at once" if not r["ran_twice_at_once"]
                                else f"{r['ran_twice_at_once']} jobs ran twice at once "
                                     f"({r['ran_twice_at_once_after_thaw']} still after the "
                                     "thaw)") for n, r in systems.items()]
    return [*lines, "", "Target: nothing ever runs twice at once.", *verdicts]


def _oversubscribed(systems: dict[str, Any]) -> list[str]:
    lines = _scenario_table("Demand 3x the quotas", systems, [
        ("jobs / quota allows at once (per worker)",
         lambda r: f"{r['jobs']} / {r['allowed_at_once']} ({r['allowed_per_worker']})"),
        ("window s", lambda r: r["window_seconds"]),
        ("most running at once", lambda r: r["max_running_at_once"]),
        ("most running on one worker", lambda r: r["max_running_on_a_worker"]),
        ("running at the end of the window", lambda r: r["running_at_end"]),
        ("s until the quota was full", lambda r: r["seconds_until_quota_full"]),
        ("workers ever above their quota (most running)", lambda r: r["workers_above_quota"]),
    ])
    verdicts = [f"- `{n}`: " + ("quota never exceeded" if not r["workers_above_quota"]
                                and r["max_running_at_once"] <= r["allowed_at_once"]
                                else "QUOTA EXCEEDED") for n, r in systems.items()]
    return [*lines, "", "Target: quota never exceeded.", *verdicts]


def _steady(systems: dict[str, Any]) -> list[str]:
    return _scenario_table("Jobs at a steady rate", systems, [
        ("rate jobs/s x s", lambda r: f"{r['rate_per_second']:g} x {r['create_seconds']}"),
        ("ran / created (within the tail)",
         lambda r: f"{r['ran']}/{r['jobs']} ({r['tail_seconds']:g} s)"),
        ("create -> remote running p50/p95/p99 ms",
         lambda r: _triple(r["create_to_remote_running"])),
    ])


def _complete(systems: dict[str, Any]) -> list[str]:
    return _scenario_table("Short jobs until all are Complete on the manager", systems, [
        ("jobs / quota allows at once; each runs s",
         lambda r: f"{r['jobs']} / {r['allowed_at_once']}; {r['run_seconds']:g}"),
        ("Complete on the manager (failed)",
         lambda r: f"{r['complete']}/{r['jobs']} ({r['failed']})"),
        ("s until all Complete (least possible)",
         lambda r: f"{_cell(r['seconds_until_all_complete'])} "
                   f"({r['least_possible_seconds']:g})"
                   + ("" if r["seconds_until_all_complete"] is not None
                      else f", not all within {r['timeout_seconds']:g} s")),
        ("create -> Complete on the manager p50/p95/p99 ms",
         lambda r: _triple(r["create_to_complete"])),
    ])


def _urgent(r: dict[str, Any]) -> str:
    if r.get("failed_step"):
        return f"not created: filling the workers stopped at {r['failed_step']}"
    if not r["urgent_ran"]:
        return f"did not run in {r['timeout_seconds']:g} s"
    where = ", ".join(r["urgent_ran_on"])
    kind = "the big jobs' worker" if r["urgent_on_big_worker"] else "a small jobs' worker"
    return f"{r['create_to_urgent_running_seconds']} s, on {where} ({kind})"


def _preemption(systems: dict[str, Any]) -> list[str]:
    lines = _scenario_table("An urgent job when every worker is full", systems, [
        ("low jobs running before it, by worker and size",
         lambda r: "; ".join(f"{w}: " + ", ".join(f"{n} x {size}" for size, n in jobs.items())
                             for w, jobs in r["low_jobs_before_urgent"].items()) or "-"),
        ("the big jobs' worker", lambda r: r["big_worker"] or "-"),
        ("urgent job: CPU (priority)",
         lambda r: f"{r['urgent_cpu']} ({r['urgent_priority']}; the low jobs' "
                   f"{r['low_priority']})"),
        ("create -> urgent job running s, where", _urgent),
        ("low jobs stopped (fewest possible)",
         lambda r: f"{r['stopped_count']} ({r['fewest_possible_stopped']})"
                   if "stopped_count" in r else "-"),
        ("... by worker", lambda r: {w: len(n) for w, n in r.get("stopped", {}).items()}),
        ("... their CPU", lambda r: r.get("stopped_cpu")),
        ("create -> first low job stopped s", lambda r: r.get("create_to_first_stop_seconds")),
        ("low jobs running at the end (of)",
         lambda r: f"{r['low_running_at_end']} ({r['low_jobs']})"
                   if "low_running_at_end" in r else "-"),
        ("jobs ever on two workers at once", lambda r: r["ran_twice_at_once"]),
        ("Kueue feature gates added", lambda r: ", ".join(r["kueue_feature_gates"]) or "-"),
    ])
    verdicts = [f"- `{n}`: " + _preemption_verdict(r) for n, r in systems.items()]
    return [*lines, "", "The urgent job is as big as one big job and as several small "
            "ones: room for it costs one job on the big jobs' worker. Target: it runs, "
            "stopping the fewest jobs, nothing on two workers at once.", *verdicts]


def _preemption_verdict(r: dict[str, Any]) -> str:
    if r["failed_step"]:
        return f"not measured: filling the workers stopped at {r['failed_step']}"
    if not r["urgent_ran"]:
        return f"the urgent job did not run in {r['timeout_seconds']:g} s"
    twice = (f"; {r['ran_twice_at_once']} jobs ran on two workers at once"
             if r["ran_twice_at_once"] else "")
    return (f"ran after {r['create_to_urgent_running_seconds']} s, stopping "
            f"{r['stopped_count']} low jobs ({r['fewest_possible_stopped']} would do)" + twice)


def scenario_markdown(results: dict[str, dict[str, Any]], *, workers: int,
                      settings: dict[str, Any], sizes: dict[str, Any]) -> str:
    trainer = ("the real Kubeflow Trainer v2.3.0 and JobSet v0.12.0 on every cluster and "
               "kube-scheduler with kwok nodes holding each worker's quota (the pods of "
               "`complete` run for its run time once the worker's Kueue admits them)"
               if sizes.get("real_chain") else
               "the same simulated trainer on every worker (jobs run for an hour once "
               "unsuspended; in `complete`, for its run time)")
    parts = [f"# Peer benchmark: behaviour, {workers} workers", "",
             f"Each system on fresh clusters with {trainer} and the "
             "same TrainJobs; every number comes from the harness's own watches of the "
             "workers and the manager. A copy runs when it is present, not suspended and not "
             "finished; a copy on a frozen worker counts as running until it is seen gone "
             "after the thaw (its pods would go on running).",
             ""]
    render = {"frozen": _frozen, "oversubscribed": _oversubscribed, "steady": _steady,
              "complete": _complete, "preemption": _preemption}
    for scenario, systems in results.items():
        parts += [*render[scenario](systems), ""]
    parts += ["## Settings", "", f"- sizes: {sizes}"]
    parts += [f"- `{n}`: {s}" for n, s in settings.items()]
    return "\n".join(parts) + "\n"


def write_scenario_reports(results: dict[str, dict[str, Any]], *, workers: int,
                           sizes: Any, partial: bool = False) -> str:
    from dataclasses import asdict

    from bench.peer.plot import plot_scenarios
    from bench.peer.systems import SYSTEMS

    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / (f"peer-scenarios-{workers}w"
                      + ("-" + "-".join(results) if partial else "")
                      + ("-real-chain" if sizes.real_chain else ""))
    names = {n for systems in results.values() for n in systems}
    settings = {n: SYSTEMS[n].describe() for n in sorted(names)}
    stem.with_suffix(".json").write_text(json.dumps(
        {"workers": workers, "sizes": asdict(sizes), "settings": settings,
         "scenarios": results}, indent=2) + "\n")
    text = scenario_markdown(results, workers=workers, settings=settings, sizes=asdict(sizes))
    stem.with_suffix(".md").write_text(text)
    plot_scenarios(results, stem.with_suffix(".png"))
    return text
