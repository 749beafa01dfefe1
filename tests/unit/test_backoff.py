"""The informer's reconnect backoff: it grows while failures continue and starts over
after the connection has been up for a while."""

from __future__ import annotations

from dispatcher.kube.informer import Backoff


def delays(backoff: Backoff, times: list[float]) -> list[float]:
    return [backoff.failed(t) for t in times]


def test_grows_while_failing_and_is_capped() -> None:
    backoff = Backoff(initial=0.5, maximum=4.0, reset_after=60.0)
    waits = delays(backoff, [0, 1, 2, 3, 4, 5])
    base = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert all(b <= w <= b + 1.0 for w, b in zip(waits, base, strict=True))
    assert all(w <= 5.0 for w in waits)


def test_a_short_recovery_keeps_growing_a_long_one_starts_over() -> None:
    backoff = Backoff(initial=0.5, maximum=30.0, reset_after=60.0)
    delays(backoff, [0, 1, 2])
    backoff.up(10.0)
    assert backoff.failed(20.0) >= 4.0  # up for 10 s only: the fourth step
    backoff.up(30.0)
    assert backoff.failed(100.0) <= 1.5  # up for 70 s: the first step again


def test_reset_starts_over() -> None:
    backoff = Backoff(initial=0.5, maximum=30.0, reset_after=60.0)
    delays(backoff, [0, 1, 2, 3])
    backoff.reset()
    assert backoff.failed(4.0) <= 1.5
