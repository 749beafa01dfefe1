"""The manager-side queue: pending jobs, one scheduling pass at a time, reservations.

Reconciles `submit` jobs that need a worker. A pass (`placement.scheduler.schedule`) runs
whenever something may have changed: a job arrived, quota was released, a worker came,
went or changed. A placed job gets a *reservation*: its demand is booked in the ledger
at once, so the next pass cannot give the same quota away, and its key is handed back to
the reconciler, which records the placement on the manager and creates the mirror.
Passes coalesce: triggers during a pass cause exactly one more pass.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable

from dispatcher.api import constants as c
from dispatcher.placement.ledger import Booking, Ledger, LedgerError
from dispatcher.placement.options import PlacementPolicy, QueueingStrategy
from dispatcher.placement.scheduler import Decision, PendingJob, WorkerView, schedule

log = logging.getLogger(__name__)


class SchedulingLoop:
    def __init__(
        self,
        *,
        ledger: Ledger,
        workers: Callable[[], list[WorkerView]],
        policy: PlacementPolicy,
        strategy: QueueingStrategy,
        on_decision: Callable[[Decision], None],
        on_pass: Callable[[], None] = lambda: None,
    ) -> None:
        self.ledger = ledger
        self.pending: dict[str, PendingJob] = {}
        self.reservations: dict[str, str] = {}
        self.decisions: dict[str, Decision] = {}
        self._workers = workers
        self._policy = policy
        self._strategy = strategy
        self._on_decision = on_decision
        self._on_pass = on_pass
        self._wakeup = asyncio.Event()
        self.ready = asyncio.Event()
        """Set once the ledger is rebuilt; no pass runs before."""

    def submit(self, job: PendingJob) -> None:
        previous = self.pending.get(job.uid)
        self.pending[job.uid] = job
        if previous != job:
            self.trigger()

    def withdraw(self, uid: str) -> None:
        """Forget a job's pending entry and any reservation not yet recorded."""
        self.pending.pop(uid, None)
        self.decisions.pop(uid, None)
        if self.reservations.pop(uid, None) is not None:
            self.ledger.release(uid)
            self.trigger()

    def reservation(self, uid: str) -> str | None:
        return self.reservations.get(uid)

    def confirm(self, uid: str) -> None:
        """The placement is recorded on the manager: the booking now stands on its own."""
        self.reservations.pop(uid, None)

    def missing_runtimes(self, worker: str) -> list[str]:
        """Why pending jobs cannot run on `worker` with its runtimes, and for how many."""
        counts = collections.Counter(job.missing_on[worker] for job in self.pending.values()
                                     if worker in job.missing_on)
        return [f"{why} (needed by {n} pending job{'s' if n > 1 else ''})"
                for why, n in sorted(counts.items())]

    def trigger(self) -> None:
        self._wakeup.set()

    def run_pass(self) -> None:
        if not self.pending:
            return
        views = self._workers()
        quotas = {view.name: view.quota for view in views}
        for decision in schedule(self.pending.values(), views,
                                 policy=self._policy, strategy=self._strategy):
            job = self.pending[decision.uid]
            if decision.worker is not None:
                try:
                    self.ledger.book(Booking(job.uid, job.key, decision.worker,
                                             job.demand_of(decision.worker)),
                                     quota=quotas[decision.worker])
                except LedgerError:
                    log.exception("refused a placement that breaks the ledger's invariants")
                    continue
                del self.pending[decision.uid]
                self.decisions.pop(decision.uid, None)
                self.reservations[job.uid] = decision.worker
                self._on_decision(decision)
                continue
            previous = self.decisions.get(decision.uid)
            self.decisions[decision.uid] = decision
            if previous is None or (previous.reason, previous.message) != (
                decision.reason, decision.message
            ):
                self._on_decision(decision)
                if decision.reason == c.REASON_UNSCHEDULABLE:
                    log.info("job %s is unschedulable: %s", job.key, decision.message,
                             extra={"job": job.key})
        self._on_pass()

    async def run(self) -> None:
        await self.ready.wait()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                self.run_pass()
            except Exception:
                log.exception("scheduling pass failed")
            await asyncio.sleep(0)
