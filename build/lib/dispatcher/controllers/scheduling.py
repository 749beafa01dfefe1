"""The manager-side queue: pending jobs, one scheduling pass at a time, reservations.

Reconciles `submit` jobs that need a worker. A pass (`placement.scheduler.schedule`) runs
whenever something may have changed: a job arrived, quota was released, a worker came,
went or changed. A placed job gets a *reservation*: its demand is booked in the ledger
at once, so the next pass cannot give the same quota away, and its key is handed back to
the reconciler, which records the placement on the manager and creates the mirror.
Passes coalesce: triggers during a pass cause exactly one more pass.

With preemption, a pass may *nominate* a job on a worker (`Preempting`): the nomination
is kept here and handed to the next passes (which hold the job's room there), and each
new victim is handed to the reconciler (`on_victim`), whose snapshot asks
`preemptor_of` and takes the victim off. A nomination lives in memory only: after a
restart the next pass chooses again from what then runs (the victims already taken off
are requeued, and their room is free).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.api import constants as c
from dispatcher.placement.ledger import Booking, Ledger, LedgerError
from dispatcher.placement.options import PlacementPolicy, PreemptionPolicy, QueueingStrategy
from dispatcher.placement.scheduler import (
    Decision,
    Nomination,
    PendingJob,
    RunningJobs,
    WorkerView,
    schedule,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Preemptor:
    """The job a victim makes room for."""

    key: str
    priority: int
    worker: str


@dataclass(frozen=True, slots=True)
class VerdictTimes:
    """When a waiting job's current verdict was first given, and its first verdict of
    this wait (by the loop's wall clock): how long a reason has stood."""

    since: float
    waiting_since: float


class SchedulingLoop:
    def __init__(
        self,
        *,
        ledger: Ledger,
        workers: Callable[[], list[WorkerView]],
        policy: PlacementPolicy,
        strategy: QueueingStrategy,
        on_decision: Callable[[Decision], None],
        on_pass: Callable[[float, int], None] = lambda seconds, decisions: None,
        preemption: PreemptionPolicy = PreemptionPolicy.NEVER,
        running: RunningJobs | None = None,
        wall: Callable[[], float] = lambda: 0.0,
        on_victim: Callable[[str], None] = lambda key: None,
    ) -> None:
        self.ledger = ledger
        self.pending: dict[str, PendingJob] = {}
        self._missing: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter)
        """Worker -> why a pending job cannot run there -> how many pending jobs."""
        self.reservations: dict[str, str] = {}
        self.decisions: dict[str, Decision] = {}
        self.verdict_times: dict[str, VerdictTimes] = {}
        self.nominations: dict[str, Nomination] = {}
        """Preemptor UID -> the worker it is nominated on and its victims."""
        self._preemption = preemption
        self._running = running
        self._wall = wall
        self._on_victim = on_victim
        self._workers = workers
        self._policy = policy
        self._strategy = strategy
        self._on_decision = on_decision
        self._on_pass = on_pass
        self._wakeup = asyncio.Event()
        self.ready = asyncio.Event()
        """Set once the ledger is rebuilt; no pass runs before."""

    def submit(self, job: PendingJob) -> None:
        previous = self._replace(job.uid, job)
        if previous != job:
            self.trigger()

    def withdraw(self, uid: str) -> None:
        """Forget a job's pending entry and any reservation not yet recorded."""
        self._replace(uid, None)
        self.decisions.pop(uid, None)
        self.verdict_times.pop(uid, None)
        self.nominations.pop(uid, None)
        if self.reservations.pop(uid, None) is not None:
            self.ledger.release(uid)
            self.trigger()

    def preemptor_of(self, uid: str, worker: str) -> Preemptor | None:
        """The job that job `uid`, placed on `worker`, is preempted for; None if none."""
        for preemptor, nomination in self.nominations.items():
            job = self.pending.get(preemptor)
            if job is not None and nomination.worker == worker and uid in nomination.victims:
                return Preemptor(job.key, job.priority, worker)
        return None

    def victims_on(self, worker: str) -> frozenset[str]:
        """The UIDs of the jobs nominated as victims (or awaited) on `worker`."""
        return frozenset().union(*(n.held for n in self.nominations.values()
                                   if n.worker == worker))

    def reservation(self, uid: str) -> str | None:
        return self.reservations.get(uid)

    def confirm(self, uid: str) -> None:
        """The placement is recorded on the manager: the booking now stands on its own."""
        self.reservations.pop(uid, None)

    def missing_runtimes(self, worker: str) -> list[str]:
        """Why pending jobs cannot run on `worker` with its runtimes, and for how many."""
        counts = self._missing.get(worker, collections.Counter())
        return [f"{why} (needed by {n} pending job{'s' if n > 1 else ''})"
                for why, n in sorted(counts.items())]

    def _replace(self, uid: str, job: PendingJob | None) -> PendingJob | None:
        """Set (or, with None, remove) a pending entry, keeping the counts of what is
        missing where in step; the previous entry back."""
        previous = self.pending.get(uid) if job is not None else self.pending.pop(uid, None)
        for worker, why in (previous.missing_on.items() if previous is not None else ()):
            self._missing[worker][why] -= 1
            if self._missing[worker][why] <= 0:
                del self._missing[worker][why]
        if job is not None:
            self.pending[uid] = job
            for worker, why in job.missing_on.items():
                self._missing[worker][why] += 1
        return previous

    def trigger(self) -> None:
        self._wakeup.set()

    def run_pass(self) -> None:
        if not self.pending:
            return
        started, now = time.perf_counter(), self._wall()
        views = self._workers()
        quotas = {view.name: view.quota for view in views}
        decisions = schedule(self.pending.values(), views, policy=self._policy,
                             strategy=self._strategy, preemption=self._preemption,
                             nominations=self.nominations,
                             running=self._running or (lambda: {}), now=now)
        for decision in decisions:
            job = self.pending[decision.uid]
            self._nominate(decision)
            if decision.worker is not None:
                try:
                    self.ledger.book(Booking(job.uid, job.key, decision.worker,
                                             job.demand_of(decision.worker)),
                                     quota=quotas[decision.worker])
                except LedgerError:
                    log.exception("refused a placement that breaks the ledger's invariants")
                    continue
                self._replace(decision.uid, None)
                self.decisions.pop(decision.uid, None)
                self.verdict_times.pop(decision.uid, None)
                self.reservations[job.uid] = decision.worker
                self._on_decision(decision)
                continue
            previous = self.decisions.get(decision.uid)
            self.decisions[decision.uid] = decision
            if previous is None or (previous.reason, previous.message) != (
                decision.reason, decision.message
            ):
                first = self.verdict_times.get(decision.uid)
                self.verdict_times[decision.uid] = VerdictTimes(
                    since=now, waiting_since=first.waiting_since if first else now)
                self._on_decision(decision)
                if decision.reason == c.REASON_UNSCHEDULABLE:
                    log.info("job %s is unschedulable: %s", job.key, decision.message,
                             extra={"job": job.key})
        self._on_pass(time.perf_counter() - started, len(decisions))

    def _nominate(self, decision: Decision) -> None:
        """Keep a `Preempting` decision's nomination (and hand its new victims to the
        reconciler); any other decision ends the job's nomination."""
        if decision.reason != c.REASON_PREEMPTING:
            self.nominations.pop(decision.uid, None)
            return
        previous = self.nominations.get(decision.uid)
        before = previous.victims if previous is not None and (
            previous.worker == decision.preempting_on) else frozenset()
        self.nominations[decision.uid] = Nomination(
            decision.preempting_on, frozenset(v.uid for v in decision.victims),
            frozenset(v.uid for v in decision.awaiting), message=decision.message,
            cleared=decision.cleared)
        for victim in decision.victims:
            if victim.uid not in before:
                log.info("job %s preempts %s on worker %s", decision.key, victim.key,
                         decision.preempting_on, extra={"job": decision.key})
                self._on_victim(victim.key)

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
