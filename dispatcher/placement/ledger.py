"""The quota ledger: what the dispatcher has placed on each worker and not yet released.

Bookings are keyed by the manager TrainJob's UID, so booking twice is a no-op and a
restart that rebuilds the ledger from the manager's placement annotations books nothing
twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dispatcher.placement import resources


@dataclass(frozen=True)
class Booking:
    uid: str
    key: str
    worker: str
    demand: dict[str, Fraction]


class Ledger:
    """Bookings by job UID, with per-worker totals kept up to date."""

    def __init__(self) -> None:
        self._bookings: dict[str, Booking] = {}
        self._used: dict[str, dict[str, Fraction]] = {}

    def __len__(self) -> int:
        return len(self._bookings)

    def __contains__(self, uid: str) -> bool:
        return uid in self._bookings

    def get(self, uid: str) -> Booking | None:
        return self._bookings.get(uid)

    def book(self, booking: Booking) -> None:
        """Record a booking; replaces an earlier booking of the same job."""
        self.release(booking.uid)
        self._bookings[booking.uid] = booking
        self._used[booking.worker] = resources.add(
            self._used.get(booking.worker, {}), booking.demand
        )

    def release(self, uid: str) -> Booking | None:
        booking = self._bookings.pop(uid, None)
        if booking is not None:
            self._used[booking.worker] = resources.subtract(
                self._used[booking.worker], booking.demand
            )
        return booking

    def used(self, worker: str) -> dict[str, Fraction]:
        return {k: v for k, v in self._used.get(worker, {}).items() if v}

    def jobs_on(self, worker: str) -> list[Booking]:
        return [b for b in self._bookings.values() if b.worker == worker]
