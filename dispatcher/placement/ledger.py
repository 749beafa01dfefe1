"""The quota ledger: what the dispatcher has placed on each worker and not yet released.

Bookings are keyed by the manager TrainJob's UID, so booking twice is a no-op and a
restart that rebuilds the ledger from the manager's placement annotations books nothing
twice.

The ledger keeps two invariants and refuses (`LedgerError`) any booking that would break
them: no amount is negative (a negative booking would free quota for others to
overbook), and a booking made against a quota (a new placement) never takes the worker's
usage above it. `violations` checks both over the whole ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dispatcher.placement import resources
from dispatcher.placement.quantity import format_quantity


@dataclass(frozen=True)
class Booking:
    uid: str
    key: str
    worker: str
    demand: dict[str, Fraction]


class LedgerError(ValueError):
    """A booking that would break the ledger's invariants."""


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

    def book(self, booking: Booking, *, quota: dict[str, Fraction] | None = None) -> None:
        """Record a booking, replacing an earlier one of the same job; with `quota`, only
        if the worker's usage stays within it."""
        negative = sorted(name for name, amount in booking.demand.items() if amount < 0)
        if negative:
            raise LedgerError(f"{booking.key}: negative amount of {', '.join(negative)}")
        if quota is not None:
            after = resources.add(self.used(booking.worker), booking.demand)
            previous = self._bookings.get(booking.uid)
            if previous is not None and previous.worker == booking.worker:
                after = resources.subtract(after, previous.demand)
            over = resources.shortfalls(after, quota)
            if over:
                raise LedgerError(f"{booking.key} on {booking.worker} would exceed its quota: "
                                  + "; ".join(s.describe() for s in over))
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

    def violations(self, quotas: dict[str, dict[str, Fraction] | None]) -> list[str]:
        """Broken invariants: negative usage anywhere, usage above a worker's quota."""
        found = []
        for worker, used in self._used.items():
            for name, amount in sorted(used.items()):
                if amount < 0:
                    found.append(f"{worker}: {name} usage is negative "
                                 f"({format_quantity(amount)})")
            for shortfall in resources.shortfalls(used, quotas.get(worker)):
                found.append(f"{worker}: {format_quantity(shortfall.needed)} "
                             f"{shortfall.resource} booked, quota "
                             f"{format_quantity(shortfall.available)}")
        return found
