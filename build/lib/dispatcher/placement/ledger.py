"""The quota ledger: what runs, or will run, on each worker by this dispatcher's hand.

Two sources, and a worker's usage counts each job on it once, at the larger of the two:
- *bookings*, keyed by the manager job's UID: the placements on record (the Placement
  objects) and the scheduler's reservations not yet recorded; booking twice is a no-op,
  so a restart that rebuilds the ledger from the records books nothing twice;
- *live mirrors*, keyed by (worker, manager UID): every unfinished mirror of this
  dispatcher's origin seen on a worker. A mirror is evidence of what runs whatever the
  manager says, so a worker's usage is never below what really runs there: a mirror
  whose job lost its record (deleted under it, or placed elsewhere while its worker was
  unreachable) still counts until it is gone.

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

Vector = dict[str, Fraction]


@dataclass(frozen=True)
class Booking:
    uid: str
    key: str
    worker: str
    demand: Vector


@dataclass(frozen=True)
class Holding:
    """What one job holds on a worker: its booking there, its live mirror there, or both."""

    uid: str
    key: str
    demand: Vector


class LedgerError(ValueError):
    """A booking that would break the ledger's invariants."""


class Ledger:
    """Bookings by job UID and live mirrors by (worker, UID), with per-worker totals."""

    def __init__(self) -> None:
        self._bookings: dict[str, Booking] = {}
        self._booked_on: dict[str, dict[str, Booking]] = {}
        """worker -> UID -> the booking there: a worker's jobs without a scan of all."""
        self._mirrors: dict[str, dict[str, tuple[str, Vector]]] = {}
        """worker -> manager UID -> (job key, demand) of its live mirror there."""
        self._used: dict[str, Vector] = {}

    def __len__(self) -> int:
        return len(self._bookings)

    def __contains__(self, uid: str) -> bool:
        return uid in self._bookings

    def get(self, uid: str) -> Booking | None:
        return self._bookings.get(uid)

    def _held(self, worker: str, uid: str) -> Vector:
        """What `uid` counts for on `worker`: the larger of its booking and its mirror."""
        booking = self._bookings.get(uid)
        booked = booking.demand if booking is not None and booking.worker == worker else {}
        mirror = self._mirrors.get(worker, {}).get(uid)
        return resources.maximum([booked, mirror[1] if mirror else {}])

    def _change(self, worker: str, uid: str, before: Vector) -> None:
        self._used[worker] = resources.add(
            resources.subtract(self._used.get(worker, {}), before), self._held(worker, uid))

    def book(self, booking: Booking, *, quota: Vector | None = None) -> None:
        """Record a booking, replacing an earlier one of the same job; with `quota`, only
        if the worker's usage stays within it."""
        negative = sorted(name for name, amount in booking.demand.items() if amount < 0)
        if negative:
            raise LedgerError(f"{booking.key}: negative amount of {', '.join(negative)}")
        worker, uid = booking.worker, booking.uid
        if quota is not None:
            mirror = self._mirrors.get(worker, {}).get(uid)
            after = resources.add(
                resources.subtract(self.used(worker), self._held(worker, uid)),
                resources.maximum([booking.demand, mirror[1] if mirror else {}]))
            over = resources.shortfalls(after, quota)
            if over:
                raise LedgerError(f"{booking.key} on {worker} would exceed its quota: "
                                  + "; ".join(s.describe() for s in over))
        self.release(uid)
        before = self._held(worker, uid)
        self._bookings[uid] = booking
        self._booked_on.setdefault(worker, {})[uid] = booking
        self._change(worker, uid, before)

    def release(self, uid: str) -> Booking | None:
        """Drop the job's booking; a live mirror of it still counts where it runs."""
        booking = self._bookings.get(uid)
        if booking is not None:
            before = self._held(booking.worker, uid)
            del self._bookings[uid]
            self._booked_on[booking.worker].pop(uid, None)
            self._change(booking.worker, uid, before)
        return booking

    def mirror_seen(self, worker: str, uid: str, key: str, demand: Vector) -> None:
        """A live (unfinished) mirror of job `uid` is on `worker`, holding `demand`."""
        before = self._held(worker, uid)
        self._mirrors.setdefault(worker, {})[uid] = (key, {
            name: amount for name, amount in demand.items() if amount > 0})
        self._change(worker, uid, before)

    def mirror_gone(self, worker: str, uid: str) -> bool:
        """The mirror of `uid` on `worker` is deleted or finished; True if it counted."""
        mirrors = self._mirrors.get(worker, {})
        if uid not in mirrors:
            return False
        before = self._held(worker, uid)
        del mirrors[uid]
        self._change(worker, uid, before)
        return True

    def forget_mirrors(self, worker: str) -> None:
        """The worker's mirror cache starts over (a new connection, or the worker left)."""
        for uid in list(self._mirrors.get(worker, {})):
            self.mirror_gone(worker, uid)

    def counts_mirror(self, worker: str, uid: str) -> bool:
        return uid in self._mirrors.get(worker, {})

    def mirrors_of(self, uid: str) -> list[str]:
        """The workers where a live mirror of `uid` was seen."""
        return sorted(worker for worker, mirrors in self._mirrors.items() if uid in mirrors)

    def used(self, worker: str) -> Vector:
        return {k: v for k, v in self._used.get(worker, {}).items() if v}

    def jobs_on(self, worker: str) -> list[Booking]:
        return list(self._booked_on.get(worker, {}).values())

    def holdings(self, worker: str) -> list[Holding]:
        """Every job counted on `worker`: booked there, running there, or both."""
        held = {b.uid: Holding(b.uid, b.key, self._held(worker, b.uid))
                for b in self.jobs_on(worker)}
        for uid, (key, demand) in self._mirrors.get(worker, {}).items():
            if uid not in held:
                held[uid] = Holding(uid, key, demand)
        return list(held.values())

    def violations(self, quotas: dict[str, Vector | None]) -> list[str]:
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
