"""The ledger counts each job once per worker, at the larger of its booking and its live
mirror there, and never less than the live mirrors: pure, with a property test."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.placement import resources
from dispatcher.placement.ledger import Booking, Ledger, LedgerError

CPU = "cpu"


def cpu(n: int) -> dict[str, Fraction]:
    return {CPU: Fraction(n)}


def test_a_live_mirror_counts_without_a_booking_and_is_not_counted_twice() -> None:
    ledger = Ledger()
    ledger.mirror_seen("w", "u1", "ns/a", cpu(4))
    assert ledger.used("w") == cpu(4)
    ledger.book(Booking("u1", "ns/a", "w", cpu(4)))
    assert ledger.used("w") == cpu(4)
    ledger.book(Booking("u1", "ns/a", "w", cpu(6)))
    assert ledger.used("w") == cpu(6)
    ledger.release("u1")
    assert ledger.used("w") == cpu(4), "the mirror still runs: its quota stays counted"
    assert ledger.mirror_gone("w", "u1")
    assert ledger.used("w") == {}


def test_a_job_booked_on_one_worker_with_a_copy_on_another_counts_on_both() -> None:
    ledger = Ledger()
    ledger.mirror_seen("w", "u1", "ns/a", cpu(4))
    ledger.book(Booking("u1", "ns/a", "v", cpu(4)))
    assert (ledger.used("w"), ledger.used("v")) == (cpu(4), cpu(4))
    assert ledger.mirrors_of("u1") == ["w"]
    assert {h.uid for h in ledger.holdings("w")} == {"u1"}


def test_a_placement_against_the_quota_counts_unrecorded_mirrors() -> None:
    ledger = Ledger()
    ledger.mirror_seen("w", "stray", "ns/old", cpu(60))
    with pytest.raises(LedgerError, match="would exceed its quota"):
        ledger.book(Booking("u2", "ns/b", "w", cpu(8)), quota=cpu(64))
    ledger.book(Booking("u2", "ns/b", "w", cpu(4)), quota=cpu(64))
    assert ledger.used("w") == cpu(64)


def test_forgetting_a_workers_mirrors_keeps_its_bookings() -> None:
    ledger = Ledger()
    ledger.book(Booking("u1", "ns/a", "w", cpu(2)))
    ledger.mirror_seen("w", "u1", "ns/a", cpu(3))
    ledger.mirror_seen("w", "u2", "ns/b", cpu(5))
    ledger.forget_mirrors("w")
    assert ledger.used("w") == cpu(2)
    assert ledger.mirrors_of("u2") == []


OPERATIONS = st.lists(st.tuples(
    st.sampled_from(["book", "release", "seen", "gone"]),
    st.sampled_from(["u1", "u2", "u3"]), st.sampled_from(["w", "v"]),
    st.integers(min_value=0, max_value=9)), max_size=40)


@given(OPERATIONS)
def test_usage_is_always_the_per_job_maximum_of_booking_and_mirror(
        operations: list[tuple[str, str, str, int]]) -> None:
    ledger = Ledger()
    bookings: dict[str, tuple[str, int]] = {}
    mirrors: dict[tuple[str, str], int] = {}
    for operation, uid, worker, amount in operations:
        if operation == "book":
            ledger.book(Booking(uid, f"ns/{uid}", worker, cpu(amount)))
            bookings[uid] = (worker, amount)
        elif operation == "release":
            ledger.release(uid)
            bookings.pop(uid, None)
        elif operation == "seen":
            ledger.mirror_seen(worker, uid, f"ns/{uid}", cpu(amount))
            mirrors[(worker, uid)] = amount
        else:
            ledger.mirror_gone(worker, uid)
            mirrors.pop((worker, uid), None)
    for worker in ("w", "v"):
        expected = sum(
            max(bookings[uid][1] if bookings.get(uid, ("", 0))[0] == worker else 0,
                mirrors.get((worker, uid), 0))
            for uid in ("u1", "u2", "u3"))
        assert ledger.used(worker).get(CPU, Fraction(0)) == expected
        live = sum(amount for (w, _), amount in mirrors.items() if w == worker)
        assert resources.fits(cpu(live), ledger.used(worker) or {CPU: Fraction(0)})
        assert {(b.uid, b.demand[CPU]) for b in ledger.jobs_on(worker)} == {
            (uid, Fraction(amount)) for uid, (w, amount) in bookings.items() if w == worker}
