"""A Placement record's requeue state survives the round trip through its object, and a
malformed one is a problem on the record, never a backoff or exclusion made up."""

from __future__ import annotations

from fractions import Fraction

from dispatcher.api.placement import (
    NO_EXCLUSIONS,
    PlacementRecord,
    placement_body,
    placement_spec,
    record_of,
)

WALL = 1_780_000_000.25


def test_requeue_state_round_trips_with_sub_second_times() -> None:
    record = PlacementRecord(uid="u", key="ns/j", worker="", evictions=2,
                             not_before=WALL + 0.2, excluded={"b": WALL + 30, "a": WALL + 5},
                             taken_off=("MirrorEvicted", "evicted on worker a"))
    read = record_of(placement_body(record, namespace="sys"))
    assert read.not_before == WALL + 0.2 and read.excluded == record.excluded
    assert read.taken_off == ("MirrorEvicted", "evicted on worker a")
    assert read.problem == "" and read.evictions == 2
    assert read.excluded_at(WALL + 10) == frozenset({"b"})
    assert read.excluded_at(WALL + 30) == frozenset()


def test_no_backoff_is_no_field_on_create_and_a_cleared_one_in_a_patch() -> None:
    record = PlacementRecord(uid="u", key="ns/j", worker="w", demand={"cpu": Fraction(1)})
    body = placement_body(record, namespace="sys")
    assert body["spec"]["requeue"] == {"excludedWorkers": []}
    spec = placement_spec(record)  # a merge patch: None removes the field
    assert spec["requeue"]["notBefore"] is spec["requeue"]["reason"] is None


def test_a_malformed_requeue_state_is_a_problem_not_a_guess() -> None:
    for requeue in ({"notBefore": "soon"}, {"excludedWorkers": [{"until": "x"}]}, "later"):
        read = record_of({"metadata": {"name": "u"},
                          "spec": {"job": {"namespace": "ns", "name": "j", "uid": "u"},
                                   "worker": "", "requeue": requeue}})
        assert read.problem.startswith("spec.requeue"), read.problem
        assert read.not_before == 0.0 and read.excluded == {}


def test_a_job_kept_off_no_worker_shares_the_one_empty_set() -> None:
    record = PlacementRecord(uid="u", key="ns/j", worker="", excluded={"b": WALL + 30})
    assert record.excluded_at(WALL + 10) == frozenset({"b"})
    assert record.excluded_at(WALL + 30) is NO_EXCLUSIONS
    assert PlacementRecord(uid="v", key="ns/k", worker="").excluded_at(WALL) is NO_EXCLUSIONS
