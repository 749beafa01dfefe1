"""Choosing victims: only lower priorities, a set that makes room and none it could spare,
lowest priority and latest start first, and the worker whose set costs least."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.api import constants as c
from dispatcher.placement import resources
from dispatcher.placement.options import PreemptionPolicy
from dispatcher.placement.preemption import (
    Candidate,
    Preemption,
    Running,
    choose_preemption,
    victims_on,
)
from dispatcher.placement.scheduler import (
    ROOM_RETURN_SECONDS,
    Decision,
    Nomination,
    PendingJob,
    WorkerView,
    schedule,
)

NOW = 10_000.0


def running(key: str, cpu: int, *, priority: int = 0, started: float = 0.0,
            worker: str = "w") -> Running:
    return Running(uid=key, key=key, worker=worker, demand={"cpu": Fraction(cpu)},
                   priority=priority, started=started)


def cpu(amount: int) -> dict[str, Fraction]:
    return {"cpu": Fraction(amount)}


def test_lowest_priority_then_latest_started_go_first() -> None:
    jobs = [running("old-low", 2, priority=1, started=100), running("new-low", 2, priority=1,
                                                                    started=900),
            running("mid", 2, priority=5, started=950)]
    assert [v.key for v in victims_on(cpu(2), cpu(0), jobs, priority=10) or ()] == ["new-low"]
    assert [v.key for v in victims_on(cpu(4), cpu(0), jobs, priority=10) or ()] == [
        "new-low", "old-low"]


def test_a_victim_whose_room_is_not_needed_is_spared() -> None:
    """Taken in order, the small low job comes first; the big one alone makes room."""
    jobs = [running("small", 1, priority=1), running("big", 4, priority=2)]
    assert [v.key for v in victims_on(cpu(4), cpu(0), jobs, priority=10) or ()] == ["big"]


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    jobs = [running("same", 4, priority=5), running("higher", 4, priority=9)]
    assert victims_on(cpu(4), cpu(0), jobs, priority=5) is None


def test_a_job_that_fits_preempts_nobody() -> None:
    assert victims_on(cpu(2), cpu(2), [running("low", 2)], priority=9) == ()
    assert choose_preemption(9, [Candidate("w", cpu(2), cpu(2))],
                             {"w": [running("low", 2)]}, now=NOW) is None


def test_the_worker_with_the_cheapest_set_wins() -> None:
    a = [running("a1", 2, worker="a"), running("a2", 2, worker="a")]
    b = [running("b1", 4, priority=3, worker="b")]
    c = [running("c1", 4, priority=3, started=NOW - 10, worker="c")]
    workers = [Candidate(name, cpu(0), cpu(4)) for name in "abc"]
    chosen = choose_preemption(9, workers, {"a": a, "b": b, "c": c}, now=NOW)
    assert chosen is not None and chosen.worker == "c", "one victim, and the least run lost"
    lower = [running("d1", 4, priority=1, started=0, worker="d")]
    chosen = choose_preemption(9, [*workers, Candidate("d", cpu(0), cpu(4))],
                               {"a": a, "b": b, "c": c, "d": lower}, now=NOW)
    assert chosen is not None and chosen.worker == "d", "a lower priority beats run time"


RESOURCES = ("cpu", "gpu")
vectors = st.dictionaries(st.sampled_from(RESOURCES),
                          st.integers(0, 8).map(Fraction), min_size=1)
jobs = st.lists(st.tuples(vectors, st.integers(0, 5), st.integers(0, 1000)), max_size=8)


@given(demand=vectors, free=vectors, placed=jobs, priority=st.integers(0, 6))
def test_a_chosen_set_makes_room_takes_only_lower_priorities_and_spares_none_it_could(
        demand: dict[str, Fraction], free: dict[str, Fraction],
        placed: list[tuple[dict[str, Fraction], int, int]], priority: int) -> None:
    candidates = [Running(uid=f"j{i}", key=f"j{i}", worker="w", demand=d, priority=p,
                          started=float(s)) for i, (d, p, s) in enumerate(placed)]
    victims = victims_on(demand, free, candidates, priority=priority)
    lower = [v for v in candidates if v.priority < priority]
    everything = resources.add(free, *(v.demand for v in lower))
    if victims is None:
        assert not resources.fits(demand, everything), "a set existed"
        return
    if resources.fits(demand, free):
        assert victims == (), "it fits: nobody is preempted"
        return
    assert all(v.priority < priority for v in victims)
    assert len({v.uid for v in victims}) == len(victims)
    room = resources.add(free, *(v.demand for v in victims))
    assert resources.fits(demand, room)
    for spared in victims:
        assert not resources.fits(demand, resources.subtract(room, spared.demand)), (
            f"{spared.key} was not needed")


@given(placed=jobs, priority=st.integers(0, 6))
def test_the_choice_is_the_cheapest_over_the_workers(
        placed: list[tuple[dict[str, Fraction], int, int]], priority: int) -> None:
    by_worker: dict[str, list[Running]] = {"a": [], "b": []}
    for i, (d, p, s) in enumerate(placed):
        worker = "ab"[i % 2]
        by_worker[worker].append(Running(uid=f"j{i}", key=f"j{i}", worker=worker, demand=d,
                                         priority=p, started=float(s)))
    demand = cpu(3)
    workers = [Candidate(name, cpu(0), demand) for name in "ab"]
    chosen = choose_preemption(priority, workers, by_worker, now=NOW)
    sets = {name: victims_on(demand, cpu(0), by_worker[name], priority=priority)
            for name in "ab"}
    if chosen is None:
        assert not any(sets.values())
        return
    assert chosen.victims == sets[chosen.worker]
    assert all(v.worker == chosen.worker for v in chosen.victims)
    for name, victims in sets.items():
        if victims:
            assert chosen.cost(NOW) <= Preemption(name, victims).cost(NOW)


# ----- in the scheduling pass: nominate once, hold the room, wait for the victims -----


def worker_view(name: str, quota: int, used: int) -> WorkerView:
    return WorkerView(name=name, quota=cpu(quota), used=cpu(used))


def pending_job(key: str, amount: int, priority: int) -> PendingJob:
    return PendingJob(key=key, uid=key, demand=cpu(amount), priority=priority,
                      created=f"2026-01-01T00:00:0{len(key) % 10}Z")


def test_a_pass_nominates_the_cheapest_worker_and_holds_its_room() -> None:
    placed = {"a": [running("a1", 4, worker="a", priority=1)],
              "b": [running("b1", 2, worker="b"), running("b2", 2, worker="b")]}
    urgent, later = pending_job("urgent", 4, priority=9), pending_job("later", 4, priority=9)
    views = [worker_view("a", 4, 4), worker_view("b", 4, 4)]
    [first, second] = schedule([urgent, later], views, preemption=PreemptionPolicy.LOWER_PRIORITY,
                               running=lambda: placed, now=NOW)
    assert (first.reason, first.preempting_on, [v.key for v in first.victims]) == (
        c.REASON_PREEMPTING, "a", ["a1"])
    assert "a1 (priority 1)" in first.message
    assert (second.preempting_on, [v.key for v in second.victims]) == ("b", ["b1", "b2"]), (
        "a1 is spoken for: the next job preempts elsewhere")


def test_the_nomination_holds_until_the_victims_are_gone_and_no_one_else_takes_the_room() -> None:
    placed: dict[str, list[Running]] = {"a": [running("a1", 4, worker="a")]}
    urgent, small = pending_job("urgent", 4, priority=9), pending_job("small", 1, priority=0)
    nominations = {"urgent": Nomination("a", frozenset({"a1"}))}
    decisions = schedule([urgent, small], [worker_view("a", 5, 4)],
                         preemption=PreemptionPolicy.LOWER_PRIORITY, nominations=nominations,
                         running=lambda: placed, now=NOW)
    assert [(d.key, d.reason) for d in decisions] == [
        ("urgent", c.REASON_PREEMPTING), ("small", c.REASON_WAITING_FOR_QUOTA)], (
        "1 cpu is free, but the urgent job holds it")
    placed["a"] = []  # the victim's mirror is gone
    [placed_now, small_now] = schedule(
        [urgent, small], [worker_view("a", 5, 0)], preemption=PreemptionPolicy.LOWER_PRIORITY,
        nominations=nominations, running=lambda: placed, now=NOW)
    assert (placed_now.worker, small_now.worker) == ("a", "a")


def test_no_preemption_with_never_for_equal_priority_or_when_it_fits_elsewhere() -> None:
    placed = {"a": [running("a1", 4, worker="a", priority=5)]}
    job = pending_job("urgent", 4, priority=5)
    for policy, views, priority in (
            (PreemptionPolicy.NEVER, [worker_view("a", 4, 4)], 9),
            (PreemptionPolicy.LOWER_PRIORITY, [worker_view("a", 4, 4)], 5),
            (PreemptionPolicy.LOWER_PRIORITY, [worker_view("a", 4, 4), worker_view("b", 4, 0)],
             9)):
        [decision] = schedule([dataclasses.replace(job, priority=priority)], views,
                              preemption=policy, running=lambda: placed, now=NOW)
        assert decision.reason != c.REASON_PREEMPTING and not decision.victims


def test_a_nomination_on_a_worker_no_longer_usable_is_chosen_again() -> None:
    placed = {"a": [running("a1", 4, worker="a")], "b": [running("b1", 4, worker="b")]}
    nominations = {"urgent": Nomination("a", frozenset({"a1"}))}
    lost = worker_view("a", 4, 4)
    lost.active = False
    [decision] = schedule([pending_job("urgent", 4, priority=9)], [lost, worker_view("b", 4, 4)],
                          preemption=PreemptionPolicy.LOWER_PRIORITY, nominations=nominations,
                          running=lambda: placed, now=NOW)
    assert (decision.preempting_on, [v.key for v in decision.victims]) == ("b", ["b1"])


# ----- jobs already leaving (taken off before a restart, evicted): room, not victims -----


@given(demand=vectors, free=vectors, placed=jobs, leaving=st.lists(st.booleans(), max_size=8),
       priority=st.integers(0, 6))
def test_a_leaving_job_is_counted_as_room_and_never_chosen(
        demand: dict[str, Fraction], free: dict[str, Fraction],
        placed: list[tuple[dict[str, Fraction], int, int]], leaving: list[bool],
        priority: int) -> None:
    candidates = [Running(uid=f"j{i}", key=f"j{i}", worker="w", demand=d, priority=p,
                          started=float(s), leaving=i < len(leaving) and leaving[i])
                  for i, (d, p, s) in enumerate(placed)]
    victims = victims_on(demand, free, candidates, priority=priority)
    going = [v for v in candidates if v.leaving and v.priority < priority]
    if victims is None:
        return
    assert not any(v.leaving for v in victims)
    room = resources.add(free, *(v.demand for v in (*going, *victims)))
    assert resources.fits(demand, room)
    for spared in victims:
        assert not resources.fits(demand, resources.subtract(room, spared.demand)), (
            f"{spared.key} was not needed: the leaving jobs' room was not counted")


def test_leaving_room_is_awaited_before_anyone_is_stopped() -> None:
    """After a restart mid-preemption the victim's mirror is still being deleted: the
    urgent job waits for it on that worker and stops no second job."""
    placed = {"a": [running("a-old", 4, worker="a", priority=1, started=100),
                    dataclasses.replace(running("a-new", 4, worker="a", priority=1,
                                                started=900), leaving=True)],
              "b": [running("b1", 2, worker="b", priority=1),
                    running("b2", 2, worker="b", priority=1)]}
    views = [worker_view("a", 8, 8), worker_view("b", 4, 4)]
    [decision] = schedule([pending_job("urgent", 4, priority=9)], views,
                          preemption=PreemptionPolicy.LOWER_PRIORITY,
                          running=lambda: placed, now=NOW)
    assert (decision.reason, decision.preempting_on, decision.victims) == (
        c.REASON_PREEMPTING, "a", ())
    assert [v.key for v in decision.awaiting] == ["a-new"]
    assert decision.message == ("waiting on worker a for the room of lower-priority jobs "
                                "leaving it: a-new")
    held = Nomination("a", frozenset(), frozenset({"a-new"}))
    [again] = schedule([pending_job("urgent", 4, priority=9)], views,
                       preemption=PreemptionPolicy.LOWER_PRIORITY, nominations={"urgent": held},
                       running=lambda: placed, now=NOW)
    assert (again.message, again.victims) == (decision.message, ()), "the hold is stable"


def test_a_leaving_job_of_equal_priority_is_not_awaited() -> None:
    placed = {"a": [dataclasses.replace(running("same", 4, worker="a", priority=9),
                                        leaving=True)]}
    [decision] = schedule([pending_job("urgent", 4, priority=9)], [worker_view("a", 4, 4)],
                          preemption=PreemptionPolicy.LOWER_PRIORITY,
                          running=lambda: placed, now=NOW)
    assert decision.reason == c.REASON_WAITING_FOR_QUOTA


def test_victims_gone_before_their_room_is_back_are_waited_for_not_replaced() -> None:
    """A worker's Kueue frees a deleted mirror's quota when its Workload goes, after the
    mirror: the urgent job keeps its worker (and its message) and stops no second job,
    for ROOM_RETURN_SECONDS; then it chooses again."""
    placed = {"a": [running("a-old", 4, worker="a", priority=1)]}
    # a-new's mirror is gone; its Workload still holds 4 of worker a's 8: all used
    said = "preempting 1 lower-priority job on worker a to make room: a-new (priority 1)"
    held = Nomination("a", frozenset({"a-new"}), message=said)
    urgent = pending_job("urgent", 4, priority=9)

    def decide(nomination: Nomination, now: float) -> Decision:
        [decision] = schedule([urgent], [worker_view("a", 8, 8)],
                              preemption=PreemptionPolicy.LOWER_PRIORITY,
                              nominations={"urgent": nomination}, running=lambda: placed,
                              now=now)
        return decision
    first = decide(held, NOW)
    assert (first.reason, first.preempting_on, first.victims, first.message, first.cleared) == (
        c.REASON_PREEMPTING, "a", (), said, NOW)
    waited = dataclasses.replace(held, victims=frozenset(), cleared=first.cleared)
    assert decide(waited, NOW + ROOM_RETURN_SECONDS - 1).victims == ()
    again = decide(waited, NOW + ROOM_RETURN_SECONDS)
    assert [v.key for v in again.victims] == ["a-old"], "the room never came back"
    [placed_now] = schedule([urgent], [worker_view("a", 8, 4)],
                            preemption=PreemptionPolicy.LOWER_PRIORITY,
                            nominations={"urgent": waited}, running=lambda: placed, now=NOW)
    assert placed_now.worker == "a", "placed as soon as the room is back"
