"""The peer benchmark's PNGs (matplotlib, optional: without it there is no picture).

- `plot_burst(result, path)`: create -> remote running latency CDF of every system in
  the burst (log scale) beside its placement throughput (bars, log scale).
- `plot_scenarios(results, path)`: the steady rate's latency CDFs, the jobs running
  over time under oversubscribed quota (with the quota as a line), the seconds until a
  frozen worker's jobs ran elsewhere (p50 and max), short jobs Complete on the
  manager over time, and the low jobs an urgent job stopped (with the fewest possible).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib missing (pip install -e '.[bench]'): no PNG", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cdf(axis: Any, values: list[float], label: str) -> None:
    if values:
        ordered = sorted(v * 1000 for v in values)
        axis.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)


def plot_burst(result: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    if plt is None:
        return
    systems = result["systems"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8),
                                         gridspec_kw={"width_ratios": [3, 2]})
    for name, system in systems.items():
        _cdf(left, system["burst"].get("latencies", []), name)
    left.set_xscale("log")
    left.set_xlabel("create -> remote job running (ms, log scale)")
    left.set_ylabel("fraction of the jobs that ran")
    left.set_title(f"burst of {result['jobs']} TrainJobs, {result['workers']} workers")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    names = list(systems)
    rates = [systems[n]["burst"]["jobs_per_second"] for n in names]
    right.barh(names, rates, color=["tab:blue" if systems[n]["settings"]["kind"] == "dispatcher"
                                    else "tab:orange" for n in names])
    right.set_xscale("log")
    right.set_xlabel("placement throughput, jobs/s (log scale)")
    for index, rate in enumerate(rates):
        right.text(rate, index, f" {rate:g}", va="center", fontsize=8)
    right.invert_yaxis()
    right.grid(True, axis="x", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_scenarios(results: dict[str, dict[str, Any]], path: Path) -> None:
    plt = _pyplot()
    if plt is None or not results:
        return
    figure, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.5),
                                squeeze=False)
    for axis, (scenario, systems) in zip(axes[0], results.items(), strict=True):
        if scenario == "steady":
            for name, result in systems.items():
                _cdf(axis, result.get("latencies", []), name)
            rate = next(iter(systems.values()))["rate_per_second"]
            axis.set_xscale("log")
            axis.set_xlabel("create -> remote running (ms, log scale)")
            axis.set_ylabel("fraction of the jobs that ran")
            axis.set_title(f"steady {rate:g} jobs/s")
        elif scenario == "oversubscribed":
            for name, result in systems.items():
                points = result.get("timeline", [])
                axis.step([t for t, _ in points], [n for _, n in points], where="post",
                          label=name)
            allowed = next(iter(systems.values()))["allowed_at_once"]
            axis.axhline(allowed, color="red", linestyle="--", label="quota allows")
            axis.set_xlabel("seconds since the first create")
            axis.set_ylabel("jobs running on workers")
            axis.set_title("demand 3x the quota")
        elif scenario == "complete":
            for name, result in systems.items():
                times = result.get("timeline", [])
                axis.step([0.0, *times], range(len(times) + 1), where="post", label=name)
            jobs = next(iter(systems.values()))["jobs"]
            axis.axhline(jobs, color="red", linestyle="--", label="all jobs")
            axis.set_xlabel("seconds since the first create")
            axis.set_ylabel("jobs Complete on the manager")
            axis.set_title("short jobs until all Complete")
        elif scenario == "frozen":
            names = list(systems)
            p50 = [systems[n]["freeze_to_running_elsewhere"].get("p50_s", 0) for n in names]
            top = [systems[n]["freeze_to_running_elsewhere"].get("max_s", 0) for n in names]
            positions = range(len(names))
            axis.bar([p - 0.2 for p in positions], p50, width=0.4, label="p50")
            axis.bar([p + 0.2 for p in positions], top, width=0.4, label="max")
            lost = next(iter(systems.values()))["lost_timeout_seconds"]
            axis.axhline(lost, color="red", linestyle="--", label="lost timeout")
            axis.set_xticks(list(positions), names, fontsize=8)
            axis.set_ylabel("seconds from the freeze until running elsewhere")
            axis.set_title("a worker's API server frozen")
        elif scenario == "preemption":
            names = list(systems)
            stopped = [systems[n].get("stopped_count", 0) for n in names]
            axis.bar(list(range(len(names))), stopped, label="low jobs stopped")
            fewest = next(iter(systems.values()))["fewest_possible_stopped"]
            axis.axhline(fewest, color="red", linestyle="--", label="fewest possible")
            axis.set_xticks(list(range(len(names))), names, fontsize=8)
            axis.set_ylabel("low-priority jobs stopped for the urgent one")
            axis.set_title("an urgent job, every worker full")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
