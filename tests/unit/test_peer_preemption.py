"""The peer benchmark's preemption scenario without clusters: the steps that fill the
workers give the same layout whatever the placement, each system gets its setup, the
systems that cannot preempt are left out, and the report renders a result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest

from bench.peer import behaviour
from bench.peer.occupancy import Occupancy
from bench.peer.preemption import (
    ORCHESTRATED_PREEMPTION,
    Layout,
    fill,
    setup,
    stopped_since,
)
from bench.peer.report import scenario_markdown
from bench.peer.scenarios import ScenarioSizes
from bench.peer.systems import SYSTEMS
from devkit.localcluster.kueue import KueueSettings, feature_gates

Choose = Callable[[dict[str, int], int], str]


def most_free(free: dict[str, int], size: int) -> str:
    return max(sorted(w for w in free if free[w] >= size), key=lambda w: free[w])


def best_fit(free: dict[str, int], size: int) -> str:
    return min(sorted(w for w in free if free[w] >= size), key=lambda w: free[w])


def last_name(free: dict[str, int], size: int) -> str:
    return max(w for w in free if free[w] >= size)


class Fleet:
    """Workers of `quota` CPU; a create runs the job at once where `choose` says (a job
    that fits nowhere never runs); a delete stops it. Plays `Creator` for `fill`."""

    def __init__(self, occupancy: Occupancy, workers: list[str], quota: int,
                 choose: Choose) -> None:
        self.occupancy = occupancy
        self.free = dict.fromkeys(workers, quota)
        self.where: dict[str, tuple[str, int]] = {}
        self.choose = choose
        self.jobs = self

    async def create(self, name: str, run_seconds: float = 0.0, *, size: int = 1,
                     priority_class: str = "") -> None:
        if any(room >= size for room in self.free.values()):
            worker = self.choose(self.free, size)
            self.free[worker] -= size
            self.where[name] = (worker, size)
            self.occupancy._update(worker, name, True)

    async def delete(self, name: str, *, namespace: str) -> None:
        worker, size = self.where.pop(name)
        self.free[worker] += size
        self.occupancy._update(worker, name, False)


def occupancy_of(workers: list[str]) -> Occupancy:
    occupancy = Occupancy({}, "bench")  # no clients: no watches, events fed by hand
    occupancy.workers = list(workers)
    occupancy.per_worker = dict.fromkeys(workers, 0)
    occupancy.max_per_worker = dict.fromkeys(workers, 0)
    return occupancy


@pytest.mark.parametrize("choose", [most_free, best_fit, last_name])
@pytest.mark.parametrize(("count", "quota"), [(2, 4), (3, 4), (3, 5)])
async def test_filling_puts_both_big_jobs_on_one_worker_and_small_ones_everywhere_else(
    choose: Choose, count: int, quota: int,
) -> None:
    workers = [f"worker-{i}" for i in range(count)]
    occupancy = occupancy_of(workers)
    fleet = Fleet(occupancy, workers, quota, choose)
    env = cast(Any, type("Env", (), {"workers": workers}))
    sizes = ScenarioSizes(place_timeout_seconds=2.0, cleanup_timeout_seconds=2.0)
    layout: Layout = await fill(env, cast(Any, fleet), occupancy, quota_cpu=quota,
                                sizes=sizes)
    assert layout.failed_step == ""
    assert fleet.free == dict.fromkeys(workers, 0)  # every worker full
    big = quota // 2
    on = {w: sorted(s for n, (where, s) in fleet.where.items() if where == w) for w in workers}
    assert on[layout.big_worker] == [1] * (quota - 2 * big) + [big, big]
    assert all(on[w] == [1] * quota for w in workers if w != layout.big_worker)
    assert set(layout.cpu) == set(fleet.where)  # the blockers are gone
    assert not occupancy.twice


def test_only_the_stops_after_the_urgent_job_of_low_jobs_count_per_worker() -> None:
    occupancy = occupancy_of(["a", "b"])
    occupancy.stopped = [(1.0, "blocker-00", "a"), (5.0, "big-1", "a"), (6.0, "big-1", "a"),
                         (7.0, "urgent", "b"), (8.0, "small-00001", "b")]
    stopped = stopped_since(occupancy, 4.0, {"big-1", "small-00001", "blocker-00"})
    assert stopped == {"a": ["big-1"], "b": ["small-00001"]}


def test_multikueue_gets_the_orchestrated_preemption_gate_and_the_dispatcher_preempts() -> None:
    mk, ours = SYSTEMS["multikueue-tuned-remote-qps"], SYSTEMS["dispatcher-fair-preempt"]
    assert setup(mk).kueue_feature_gates == (ORCHESTRATED_PREEMPTION,)
    assert setup(ours).kueue_feature_gates == ()
    assert setup(ours).cluster_queue_preemption == {"withinClusterQueue": "LowerPriority"}
    assert mk.preempts and ours.preempts
    assert not SYSTEMS["dispatcher-fair"].preempts
    assert not SYSTEMS["dispatcher-check"].preempts
    assert feature_gates(KueueSettings(feature_gates=(ORCHESTRATED_PREEMPTION,))) == (
        "VisibilityOnDemand=false,MultiKueueOrchestratedPreemption=true")


async def test_the_systems_that_cannot_preempt_are_left_out_of_the_scenario(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []

    async def fake(system: Any, *, workers: int, sizes: ScenarioSizes) -> dict[str, Any]:
        ran.append(system.name)
        return {}
    monkeypatch.setitem(behaviour.SCENARIO_RUNS, "preemption", fake)
    names = ["dispatcher-fair", "dispatcher-fair-preempt", "dispatcher-fair-wait",
             "multikueue-tuned-remote-qps"]
    results = await behaviour.run_scenarios(
        {n: SYSTEMS[n] for n in names}, workers=2, scenarios=["preemption"],
        sizes=ScenarioSizes(), only_in={"dispatcher-fair-wait": "frozen"})
    assert ran == ["dispatcher-fair-preempt", "multikueue-tuned-remote-qps"]
    assert list(results["preemption"]) == ran


def a_result(**changes: Any) -> dict[str, Any]:
    result = {
        "priority_classes": {"bench-low": 10, "bench-high": 1000}, "low_priority": 10,
        "urgent_priority": 1000, "kueue_feature_gates": [], "quota_cpu_per_worker": 4,
        "urgent_cpu": 2, "big_worker": "worker-0", "low_jobs": 6,
        "low_jobs_before_urgent": {"worker-0": {"2 CPU": 2}, "worker-1": {"1 CPU": 4}},
        "all_low_running_before_urgent": True, "failed_step": "", "timeout_seconds": 120.0,
        "fewest_possible_stopped": 1, "urgent_ran": True,
        "create_to_urgent_running_seconds": 3.2, "urgent_ran_on": ["worker-0"],
        "urgent_on_big_worker": True, "settle_seconds": 10.0,
        "stopped": {"worker-0": ["big-1"], "worker-1": []}, "stopped_count": 1,
        "stopped_cpu": 2, "create_to_first_stop_seconds": 1.1, "low_running_at_end": 5,
        "ran_twice_at_once": 0}
    return {**result, **changes}


def test_the_report_shows_where_the_urgent_job_ran_and_what_it_stopped() -> None:
    theirs = a_result(kueue_feature_gates=[ORCHESTRATED_PREEMPTION], urgent_ran_on=["worker-1"],
                      urgent_on_big_worker=False, stopped_count=2, stopped_cpu=2,
                      stopped={"worker-0": [], "worker-1": ["small-00002", "small-00003"]})
    late = a_result(urgent_ran=False, create_to_urgent_running_seconds=None, urgent_ran_on=[],
                    urgent_on_big_worker=False, stopped_count=0, stopped_cpu=0,
                    stopped={"worker-0": [], "worker-1": []})
    text = scenario_markdown({"preemption": {"ours": a_result(), "theirs": theirs,
                                             "late": late}},
                             workers=2, settings={}, sizes={})
    assert ("| low jobs running before it, by worker and size | worker-0: 2 x 2 CPU; "
            "worker-1: 4 x 1 CPU |") in text
    assert ("| create -> urgent job running s, where | 3.2 s, on worker-0 (the big jobs' "
            "worker) | 3.2 s, on worker-1 (a small jobs' worker) | did not run in 120 s |"
            ) in text
    assert "| low jobs stopped (fewest possible) | 1 (1) | 2 (1) | 0 (1) |" in text
    assert "| ... by worker | worker-0 1, worker-1 0 | worker-0 0, worker-1 2 |" in text
    assert "- `theirs`: ran after 3.2 s, stopping 2 low jobs (1 would do)" in text
    assert "- `late`: the urgent job did not run in 120 s" in text
