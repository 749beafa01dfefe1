"""What a worker's Kueue ClusterQueue can still admit, and how it meets the ledger."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.placement.capacity import OurJob, capacity, queue_room
from dispatcher.placement.live_quota import (
    QueueQuota,
    Reservation,
    available,
    parse_cluster_queue,
    potential,
    reservation_of,
)

F = Fraction


def cq(name: str, resources: list[dict[str, Any]], *, cohort: str = "",
       active: bool = True, flavor: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceGroups": [{"flavors": [{"name": flavor,
                                                             "resources": resources}]}]}
    if cohort:
        spec["cohortName"] = cohort
    condition = {"type": "Active", "status": "True" if active else "False",
                 "reason": "Ready" if active else "FlavorNotFound",
                 "message": "Can admit new workloads" if active else
                 "Can't admit new workloads: references missing ResourceFlavor(s): default."}
    return {"metadata": {"name": name}, "spec": spec, "status": {"conditions": [condition]}}


def test_a_cluster_queue_sums_flavors_and_limits() -> None:
    obj = {"metadata": {"name": "q"}, "spec": {"cohortName": "all", "resourceGroups": [
        {"flavors": [
            {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8,
                                            "borrowingLimit": 2, "lendingLimit": "3"}]},
            {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "4",
                                            "borrowingLimit": "1"}]}]},
        {"flavors": [{"name": "default", "resources": [{"name": "cpu",
                                                         "nominalQuota": "500m"}]}]},
    ]}, "status": {"conditions": [{"type": "Active", "status": "True"}]}}
    queue = parse_cluster_queue(obj)
    assert queue.nominal == {"nvidia.com/gpu": F(12), "cpu": F(1, 2)}
    assert queue.cohort == "all" and queue.active
    assert queue.borrowing_limit == {"nvidia.com/gpu": F(3), "cpu": None}
    # a100 lends 3 of its 8, h100 (no lending limit) all 4; cpu all of it.
    assert queue.lendable == {"nvidia.com/gpu": F(7), "cpu": F(1, 2)}
    assert queue.kept("nvidia.com/gpu") == F(5)


def test_an_inactive_queue_carries_kueue_s_message() -> None:
    queue = parse_cluster_queue(cq("q", [{"name": "cpu", "nominalQuota": 1}], active=False))
    assert not queue.active
    assert "missing ResourceFlavor" in queue.inactive_message


def workload(*, reserved: bool = True, finished: bool = False, queue: str = "q",
             uid: str = "job-1", usage: list[dict[str, str]] | None = None) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    if finished:
        conditions.append({"type": "Finished", "status": "True"})
    assignments = [{"name": "node", "resourceUsage": u} for u in usage or [{"cpu": "2"}]]
    return {"metadata": {"name": "w", "labels": {"kueue.x-k8s.io/job-uid": uid}},
            "status": {"conditions": conditions,
                       "admission": {"clusterQueue": queue, "podSetAssignments": assignments}}}


def test_a_workload_holds_quota_while_reserved_and_not_finished() -> None:
    held = reservation_of(workload(usage=[{"cpu": "2", "memory": "1Gi"}, {"cpu": "500m"}]))
    assert held == Reservation("q", "job-1", {"cpu": F(5, 2), "memory": F(2**30)})
    assert reservation_of(workload(reserved=False)) is None
    assert reservation_of(workload(finished=True)) is None


def quota(name: str, nominal: int, *, cohort: str = "c", lend: int | None = None,
          borrow: int | None = None) -> QueueQuota:
    return QueueQuota(name=name, cohort=cohort, nominal={"cpu": F(nominal)},
                      borrowing_limit={"cpu": None if borrow is None else F(borrow)},
                      lendable={"cpu": F(nominal if lend is None else min(lend, nominal))})


def test_without_a_cohort_a_queue_admits_its_nominal_quota_minus_usage() -> None:
    alone = quota("a", 4, cohort="")
    assert available(alone, {"a": alone}, {"a": {"cpu": F(3)}}) == {"cpu": F(1)}
    assert available(alone, {"a": alone}, {"a": {"cpu": F(9)}}) == {"cpu": F(0)}
    assert potential(alone, {"a": alone}) == {"cpu": F(4)}


def test_in_a_cohort_a_queue_borrows_what_the_others_do_not_use() -> None:
    a, b = quota("a", 4), quota("b", 4)
    queues = {"a": a, "b": b}
    assert available(a, queues, {}) == {"cpu": F(8)}
    assert available(a, queues, {"b": {"cpu": F(3)}}) == {"cpu": F(5)}
    assert potential(a, queues) == {"cpu": F(8)}
    limited = quota("a", 4, borrow=2)
    queues = {"a": limited, "b": b}
    assert available(limited, queues, {}) == {"cpu": F(6)}
    assert potential(limited, queues) == {"cpu": F(6)}
    # b lends only 1: a can reach 5; b keeps 3 for itself even when a borrows.
    stingy = quota("b", 4, lend=1)
    queues = {"a": a, "b": stingy}
    assert available(a, queues, {}) == {"cpu": F(5)}
    assert available(stingy, queues, {"a": {"cpu": F(5)}}) == {"cpu": F(3)}


# A literal model of Kueue's resource tree for one flat cohort (SubtreeQuota,
# localQuota, usage bubbling up past localQuota), to hold the closed form against.
def kueue_available(queue: QueueQuota, queues: dict[str, QueueQuota],
                    usage: dict[str, F]) -> F:
    def local(q: QueueQuota) -> F:
        return max(F(0), q.nominal["cpu"] - q.lendable["cpu"])
    if not queue.cohort:
        return max(F(0), queue.nominal["cpu"] - usage.get(queue.name, F(0)))
    members = [q for q in queues.values() if q.cohort == queue.cohort]
    subtree = sum((q.nominal["cpu"] - local(q) for q in members), F(0))
    cohort_usage = F(0)
    for q in members:  # addUsage: what exceeds the local quota lands in the cohort
        cohort_usage += max(F(0), usage.get(q.name, F(0)) - local(q))
    parent = subtree - cohort_usage
    used = usage.get(queue.name, F(0))
    limit = queue.borrowing_limit["cpu"]
    if limit is not None:
        stored = queue.nominal["cpu"] - local(queue)
        parent = min(stored - max(F(0), used - local(queue)) + limit, parent)
    return max(F(0), max(F(0), local(queue) - used) + parent)


queue_specs = st.lists(st.tuples(st.integers(0, 20), st.none() | st.integers(0, 20),
                                 st.none() | st.integers(0, 20), st.integers(0, 30)),
                       min_size=1, max_size=4)


@given(queue_specs, st.booleans())
def test_the_closed_form_matches_kueue_s_tree(specs: list[tuple[int, int | None, int | None,
                                                                   int]],
                                              in_cohort: bool) -> None:
    queues = {f"q{i}": quota(f"q{i}", n, lend=lend, borrow=borrow,
                             cohort="c" if in_cohort else "")
              for i, (n, lend, borrow, _) in enumerate(specs)}
    usage = {f"q{i}": F(u) for i, (*_, u) in enumerate(specs)}
    vectors = {name: {"cpu": amount} for name, amount in usage.items()}
    for queue in queues.values():
        room = available(queue, queues, vectors)["cpu"]
        assert room == kueue_available(queue, queues, usage)
        assert room <= potential(queue, queues)["cpu"]
        # More usage of its own never leaves a queue more room.
        busier = dict(vectors, **{queue.name: {"cpu": usage[queue.name] + 1}})
        assert available(queue, queues, busier)["cpu"] <= room


def test_our_mirrors_are_counted_once() -> None:
    queue = quota("q", 10, cohort="")
    queues = {"q": queue}
    # Kueue holds 5 in q: 2 for a local job, 3 for our admitted mirror (booked at 3).
    # A second mirror of ours, booked at 4, is not admitted yet (or not yet seen).
    admitted = OurJob(booked={"cpu": F(3)}, reservation=Reservation("q", "m1", {"cpu": F(3)}))
    waiting = OurJob(booked={"cpu": F(4)})
    room = queue_room(queue, queues, {"q": {"cpu": F(5)}}, [admitted, waiting])
    assert room.used_by_others == {"cpu": F(2)}
    assert room.free == {"cpu": F(1)}
    # A reservation larger than the booking counts at its size, never at both.
    bigger = OurJob(booked={"cpu": F(3)}, reservation=Reservation("q", "m1", {"cpu": F(4)}))
    room = queue_room(queue, queues, {"q": {"cpu": F(6)}}, [bigger])
    assert room.used_by_others == {"cpu": F(2)} and room.free == {"cpu": F(4)}


def test_capacity_without_kueue_is_quota_minus_bookings() -> None:
    room = capacity(declared={"cpu": F(8)}, booked={"cpu": F(3)})
    assert (room.quota, room.used, room.free, room.ceiling) == (
        {"cpu": F(8)}, {"cpu": F(3)}, {"cpu": F(5)}, {"cpu": F(8)})
    assert capacity(declared=None, booked={"cpu": F(3)}).free is None


def test_capacity_with_kueue_is_capped_by_the_declared_quota() -> None:
    a, b = quota("a", 4), quota("b", 4)
    room = queue_room(a, {"a": a, "b": b}, {"a": {"cpu": F(1)}}, [])
    shared = capacity(declared={"cpu": F(6), "memory": F(1)}, booked={}, room=room)
    assert shared.quota == {"cpu": F(4)}  # memory: not covered by the queue
    assert shared.ceiling == {"cpu": F(6)}
    assert shared.used_by_others == {"cpu": F(1)}
    assert shared.free == {"cpu": F(6)}  # 7 by Kueue's count, 6 declared
    assert shared.scheduler_used == {"cpu": F(0)}
    unbounded = capacity(declared=None, booked={"cpu": F(2)},
                         room=queue_room(a, {"a": a, "b": b}, {"a": {"cpu": F(1)}},
                                         [OurJob(booked={"cpu": F(2)})]))
    assert unbounded.free == {"cpu": F(5)} and unbounded.scheduler_used == {"cpu": F(3)}


def test_the_cached_summary_of_a_workload_reads_the_same() -> None:
    from dispatcher.controllers.worker_kueue import owner_key, summary

    full = workload(usage=[{"cpu": "2"}, {"cpu": "1", "memory": "1Gi"}])
    full["metadata"].update(namespace="ns", uid="u", resourceVersion="9", ownerReferences=[
        {"kind": "TrainJob", "name": "j", "uid": "job-1", "controller": True}])
    full["spec"] = {"podSets": [{"name": "node", "template": {"spec": {"containers": []}}}]}
    kept = summary(full)
    assert "spec" not in kept
    assert reservation_of(kept) == reservation_of(full)
    assert kept["status"]["conditions"] == full["status"]["conditions"]
    assert owner_key(kept) == owner_key(full) == "ns/j"
