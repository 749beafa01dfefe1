"""Queue order and worker choice: one pure scheduling pass."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.api import constants as c
from dispatcher.placement.options import PlacementPolicy, QueueingStrategy
from dispatcher.placement.resources import add, fits, remaining
from dispatcher.placement.scheduler import PendingJob, WorkerView, schedule
from dispatcher.placement.selector import parse_selector


def job(key: str, cpu: int, *, priority: int = 0, created: str = "", **kw: object) -> PendingJob:
    return PendingJob(key=key, uid=key, demand={"cpu": Fraction(cpu)}, priority=priority,
                      created=created or f"2026-01-01T00:00:{int(key[-1]):02d}Z", **kw)  # type: ignore[arg-type]


def worker(name: str, cpu: int, used: int = 0, **kw: object) -> WorkerView:
    return WorkerView(name=name, quota={"cpu": Fraction(cpu)},
                      used={"cpu": Fraction(used)}, **kw)  # type: ignore[arg-type]


def test_priority_then_creation_time() -> None:
    decisions = schedule([job("j1", 4), job("j2", 4, priority=10), job("j3", 4)],
                         [worker("a", 8)])
    placed = [d.key for d in decisions if d.worker]
    assert placed == ["j2", "j1"]
    assert [d.key for d in decisions if not d.worker] == ["j3"]


def test_best_effort_lets_small_jobs_pass_strict_does_not() -> None:
    pending = [job("j1", 6), job("j2", 2)]
    best = schedule(pending, [worker("a", 8, used=4)])
    assert {d.key: d.worker for d in best} == {"j1": None, "j2": "a"}
    strict = schedule(pending, [worker("a", 8, used=4)], strategy=QueueingStrategy.STRICT_FIFO)
    assert {d.key: d.worker for d in strict} == {"j1": None, "j2": None}
    assert "behind j1" in next(d.message for d in strict if d.key == "j2")


def test_most_free_spreads_best_fit_packs() -> None:
    workers = [worker("a", 8, used=4), worker("b", 8)]
    spread = schedule([job("j1", 2)], workers)
    assert spread[0].worker == "b"
    packed = schedule([job("j1", 2)], [worker("a", 8, used=4), worker("b", 8)],
                      policy=PlacementPolicy.BEST_FIT)
    assert packed[0].worker == "a"


def test_ties_go_to_the_first_name() -> None:
    assert schedule([job("j1", 1)], [worker("b", 8), worker("a", 8)])[0].worker == "a"


def test_too_big_for_every_quota_is_unschedulable_and_says_so() -> None:
    decision = schedule([job("j1", 32)], [worker("a", 8), worker("b", 16)])[0]
    assert decision.reason == c.REASON_UNSCHEDULABLE
    assert decision.message == "needs 32 cpu; the largest worker, b, has 16 in total"


def test_waiting_message_names_the_best_worker() -> None:
    decision = schedule([job("j1", 4)], [worker("a", 8, used=6), worker("b", 8, used=7)])[0]
    assert decision.reason == c.REASON_WAITING_FOR_QUOTA
    assert decision.message == "no worker has 4 cpu free; best: a with 2"
    assert decision.position == 1


def test_cordoned_inactive_excluded_and_selector() -> None:
    workers = [worker("a", 8, cordoned=True), worker("b", 8, active=False),
               worker("c", 8, labels={"gpu": "a100"}), worker("d", 8, labels={"gpu": "h100"})]
    decisions = schedule([
        job("j1", 1, selector=parse_selector("gpu=h100")),
        job("j2", 1, excluded=frozenset({"c", "d"})),
        job("j3", 1, selector=parse_selector("gpu in (a100)")),
    ], workers)
    by_key = {d.key: d for d in decisions}
    assert by_key["j1"].worker == "d"
    assert by_key["j2"].worker is None and by_key["j2"].reason == c.REASON_NO_ACTIVE_WORKER
    assert by_key["j3"].worker == "c"


def test_a_job_every_worker_rejected_waits_out_the_rejection() -> None:
    """Rejections pass (`placement.rejectionBackoffSeconds`): not Unschedulable, which
    with Kueue on the manager would reject the Workload for good."""
    decision = schedule([job("j1", 1, excluded=frozenset({"a", "b"}))],
                        [worker("a", 8), worker("b", 8)])[0]
    assert (decision.worker, decision.reason) == (None, c.REASON_MIRROR_REJECTED)
    assert decision.message == "every matching worker rejected the job"


def test_unlimited_worker_takes_anything() -> None:
    unlimited = WorkerView(name="u", quota=None)
    assert schedule([job("j1", 10**6)], [unlimited])[0].worker == "u"


@given(
    demands=st.lists(st.integers(min_value=1, max_value=16), min_size=1, max_size=25),
    capacities=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=4),
    strategy=st.sampled_from(list(QueueingStrategy)),
    policy=st.sampled_from(list(PlacementPolicy)),
)
def test_a_pass_never_exceeds_any_quota(demands: list[int], capacities: list[int],
                                        strategy: QueueingStrategy,
                                        policy: PlacementPolicy) -> None:
    pending = [job(f"j{i}", d, created=f"2026-01-01T00:{i:02d}:00Z")
               for i, d in enumerate(demands)]
    workers = [worker(f"w{i}", cap) for i, cap in enumerate(capacities)]
    decisions = schedule(pending, workers, policy=policy, strategy=strategy)
    assert len(decisions) == len(pending)
    for w in workers:
        placed = [p.demand for p in pending
                  for d in decisions if d.uid == p.uid and d.worker == w.name]
        assert fits(add(*placed), w.quota)
    # BestEffortFIFO is work-conserving: every waiting job fits no worker's free quota.
    if strategy == QueueingStrategy.BEST_EFFORT_FIFO:
        used = {w.name: add(*[p.demand for p in pending for d in decisions
                              if d.uid == p.uid and d.worker == w.name]) for w in workers}
        for p in pending:
            decision = next(d for d in decisions if d.uid == p.uid)
            if decision.worker is None:
                assert not any(fits(p.demand, remaining(w.quota or {}, used[w.name]))
                               for w in workers)


def gpu_worker(name: str, cpu: int, gpus: int = 0, **kw: object) -> WorkerView:
    quota = {"cpu": Fraction(cpu)} | ({"nvidia.com/gpu": Fraction(gpus)} if gpus else {})
    return WorkerView(name=name, quota=quota, **kw)  # type: ignore[arg-type]


def test_never_fits_names_the_largest_worker_even_beside_broken_unlimited_ones() -> None:
    broken = [WorkerView(name="x-broken", quota=None, active=False,
                         unavailable="BadKubeconfig: no clusters")]
    healthy = [worker("w0", 64), worker("w1", 64), worker("w2", 32)]
    [decision] = schedule([job("j1", 100000)], healthy)
    assert decision.reason == c.REASON_UNSCHEDULABLE
    assert decision.message == "needs 100000 cpu; the largest worker, w0, has 64 in total"
    # Only the broken (unlimited if ever fixed) worker could hold it: it waits for that one.
    [decision] = schedule([job("j1", 100000)], healthy + broken)
    assert decision.reason == c.REASON_NO_ACTIVE_WORKER
    assert decision.message == ("only workers that are not active could hold it: "
                                "x-broken (BadKubeconfig: no clusters)")
    assert "w0" not in decision.message


def test_a_resource_no_worker_offers_is_unschedulable() -> None:
    fpga = PendingJob(key="ns/f", uid="f", demand={"cpu": Fraction(1),
                                                   "example.com/fpga": Fraction(1)})
    [decision] = schedule([fpga], [gpu_worker("a", 8, gpus=4), worker("b", 8)])
    assert decision.reason == c.REASON_UNSCHEDULABLE
    assert decision.message == ("needs 1 example.com/fpga; "
                                "no matching worker offers example.com/fpga")


def test_only_worker_and_combination_that_no_single_worker_has() -> None:
    [only] = schedule([job("j1", 9)], [worker("a", 8)])
    assert only.message == "needs 9 cpu; the only matching worker, a, has 8 in total"
    both = PendingJob(key="ns/b", uid="b", demand={"cpu": Fraction(8),
                                                   "nvidia.com/gpu": Fraction(2)})
    [decision] = schedule([both], [gpu_worker("cpu-box", 16, gpus=1),
                                   gpu_worker("gpu-box", 4, gpus=8)])
    assert decision.reason == c.REASON_UNSCHEDULABLE
    assert decision.message.startswith("no matching worker has all it needs in total: ")
    assert "cpu-box lacks nvidia.com/gpu (2 needed, 1 in total)" in decision.message
    assert "gpu-box lacks cpu (8 needed, 4 in total)" in decision.message


def test_a_big_enough_worker_that_is_down_or_cordoned_is_waited_for_by_name() -> None:
    workers = [worker("small", 8), worker("big", 128, active=False,
                                          unavailable="Unreachable: timeout"),
               worker("huge", 256, cordoned=True)]
    [decision] = schedule([job("j1", 100)], workers)
    assert decision.reason == c.REASON_NO_ACTIVE_WORKER
    assert decision.message == ("only workers that are not active could hold it: "
                                "big (Unreachable: timeout); huge (cordoned)")
    assert decision.position == 1
    # The moment the big worker is usable again, the same job is placed there.
    workers[1] = worker("big", 128)
    [decision] = schedule([job("j1", 100)], workers)
    assert decision.worker == "big"


def test_waiting_for_quota_only_mentions_workers_that_could_hold_it() -> None:
    workers = [worker("tiny", 2), worker("big", 64, used=60)]
    [decision] = schedule([job("j1", 16)], workers)
    assert decision.reason == c.REASON_WAITING_FOR_QUOTA
    assert decision.message == "no worker has 16 cpu free; best: big with 4"


@given(
    demand=st.integers(min_value=0, max_value=300),
    workers=st.lists(st.tuples(st.integers(min_value=0, max_value=200), st.booleans(),
                               st.integers(min_value=0, max_value=200)),
                     min_size=1, max_size=5),
)
def test_reason_is_never_fits_iff_no_worker_could_ever_hold_it(
        demand: int, workers: list[tuple[int, bool, int]]) -> None:
    views = [worker(f"w{i}", cap, used=min(used, cap), active=active)
             for i, (cap, active, used) in enumerate(workers)]
    [decision] = schedule([job("j1", demand)], views)
    could_hold = [v for v in views if fits({"cpu": Fraction(demand)}, v.quota)]
    if not could_hold:
        assert decision.reason == c.REASON_UNSCHEDULABLE
    elif not any(v.active for v in could_hold):
        assert decision.reason == c.REASON_NO_ACTIVE_WORKER
    else:
        assert decision.reason in (c.REASON_PLACED, c.REASON_WAITING_FOR_QUOTA)
        if decision.worker is not None:
            assert decision.worker in {v.name for v in could_hold if v.active}


def test_a_worker_whose_kueue_lacks_the_priority_class_is_not_offered() -> None:
    workers = [worker("a", 8, priority_classes=frozenset({"low"})),
               worker("b", 8, used=6, priority_classes=frozenset({"low", "high"}))]
    decisions = schedule([job("j1", 2, priority_class="high"), job("j2", 2)], workers)
    assert {d.key: d.worker for d in decisions} == {"j1": "b", "j2": "a"}


def test_no_worker_knows_the_priority_class_says_which_and_how_to_fix() -> None:
    workers = [worker("a", 8, priority_classes=frozenset()),
               worker("b", 8, priority_classes=frozenset({"low"}))]
    decision = schedule([job("j1", 2, priority_class="high")], workers)[0]
    assert (decision.worker, decision.reason) == (None, c.REASON_UNSCHEDULABLE)
    assert "WorkloadPriorityClass 'high' exists in the Kueue of no matching worker (a; b)" \
        in decision.message
    assert c.LABEL_PRIORITY_CLASS in decision.message


def test_a_worker_without_kueue_takes_any_priority_class() -> None:
    decision = schedule([job("j1", 2, priority_class="high")], [worker("a", 8)])[0]
    assert decision.worker == "a"


def test_a_worker_without_the_jobs_runtime_is_not_offered_it() -> None:
    missing = {"b": "has no ClusterTrainingRuntime 'torch'"}
    decisions = schedule([job("j1", 2, missing_on=missing)], [worker("a", 8, used=8),
                                                              worker("b", 8)])
    assert decisions[0].worker is None
    assert decisions[0].reason == c.REASON_WAITING_FOR_QUOTA, "b is not a way out"
    placed = schedule([job("j1", 2, missing_on=missing)], [worker("a", 8), worker("b", 8)])
    assert placed[0].worker == "a"


def test_a_runtime_no_worker_has_is_its_own_reason_naming_each_worker() -> None:
    missing = {"a": "has no ClusterTrainingRuntime 'torch'",
               "b": "cannot run it with its ClusterTrainingRuntime 'torch': no trainer step"}
    decision = schedule([job("j1", 2, missing_on=missing)], [worker("a", 8), worker("b", 8)])[0]
    assert (decision.worker, decision.reason) == (None, c.REASON_RUNTIME_NOT_FOUND)
    assert decision.message == (
        "no matching worker can run it: a has no ClusterTrainingRuntime 'torch'; "
        "b cannot run it with its ClusterTrainingRuntime 'torch': no trainer step")


def test_the_demand_that_counts_on_a_worker_is_what_its_runtime_makes_of_the_job() -> None:
    bigger_on_a = {"a": {"cpu": Fraction(6)}}
    decisions = schedule([job("j1", 2, demand_on=bigger_on_a), job("j2", 4)],
                         [worker("a", 8), worker("b", 4, used=2)])
    assert {d.key: d.worker for d in decisions} == {"j1": "a", "j2": None}, (
        "j1 takes 6 of a's 8 (not 2), so j2 fits nowhere")
    never = schedule([job("j1", 2, demand_on={"a": {"cpu": Fraction(9)}},
                          missing_on={"b": "has no ClusterTrainingRuntime 'torch'"})],
                     [worker("a", 8), worker("b", 64)])[0]
    assert never.reason == c.REASON_UNSCHEDULABLE and "needs 9 cpu" in never.message
