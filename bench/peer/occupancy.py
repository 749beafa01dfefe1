"""Where each job runs, moment by moment, from the harness's own watches of the workers.

`Occupancy(clients, namespace)` runs one list+watch of the TrainJobs on every worker and
keeps, per job, the set of workers where it runs right now: a remote copy present, not
suspended (admitted by the worker's Kueue), not finished (no true Complete or Failed
condition). The watch of a frozen worker sees nothing new, so its copies keep their last
known state until the watch comes back after the thaw: a copy on an unreachable worker
counts as running, as its pods would go on running there. From these it records when
each copy started, each time a copy stopped running (suspended, deleted or finished),
the jobs ever seen running on two workers at once (and those seen so at or after
`thawed()`), the most jobs running at once in all and per worker, and a timeline of the
total for plotting. `stop()` ends the watches.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import DELETED, Informer
from dispatcher.kube.resource import Resource

FINISHED = frozenset({"Complete", "Failed"})


def is_running(event_type: str, job: dict[str, Any]) -> bool:
    """A copy that runs: present, not suspended, not finished."""
    if event_type == DELETED or (job.get("spec") or {}).get("suspend"):
        return False
    conditions = (job.get("status") or {}).get("conditions") or []
    return not any(c.get("type") in FINISHED and c.get("status") == "True" for c in conditions)


class Occupancy:
    """Running copies of every job on every worker, with the moments they changed."""

    def __init__(self, clients: dict[str, ClusterClient], namespace: str) -> None:
        self.workers = list(clients)
        self.running: dict[str, set[str]] = {}
        """Job -> workers where it runs now (as last seen)."""
        self.started: dict[tuple[str, str], float] = {}
        """(job, worker) -> when that copy last started running."""
        self.stopped: list[tuple[float, str, str]] = []
        """(moment, job, worker) each time a running copy stopped running."""
        self.first_seen: dict[str, float] = {}
        """Job -> when a remote copy was first seen at all (running or not)."""
        self.first_running: dict[str, float] = {}
        self.twice: dict[str, float] = {}
        """Job -> when it was first seen running on two workers at once."""
        self.twice_after_thaw: set[str] = set()
        self.thawed_at: float | None = None
        self.per_worker: dict[str, int] = dict.fromkeys(self.workers, 0)
        self.max_per_worker: dict[str, int] = dict.fromkeys(self.workers, 0)
        self.total = 0
        self.max_total = 0
        self.timeline: list[tuple[float, int]] = []
        self.informers = {
            worker: Informer(Resource(client, TRAINJOBS), namespace=namespace,
                             name=f"peer-occupancy/{worker}")
            for worker, client in clients.items()}
        self.tasks = []
        for worker, informer in self.informers.items():
            informer.add_handler(self._handler(worker))
            self.tasks.append(asyncio.create_task(informer.run(),
                                                  name=f"peer-occupancy/{worker}"))

    async def synced(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.informers.values()))

    def _handler(self, worker: str) -> Any:
        def on(event_type: str, job: dict[str, Any]) -> None:
            self.first_seen.setdefault(job["metadata"]["name"], time.monotonic())
            self._update(worker, job["metadata"]["name"], is_running(event_type, job))
        return on

    def _update(self, worker: str, name: str, running: bool) -> None:
        now = time.monotonic()
        where = self.running.setdefault(name, set())
        if running == (worker in where):
            return
        if running:
            where.add(worker)
            self.started[(name, worker)] = now
            self.first_running.setdefault(name, now)
            self.per_worker[worker] += 1
            self.total += 1
            self.max_per_worker[worker] = max(self.max_per_worker[worker],
                                              self.per_worker[worker])
            self.max_total = max(self.max_total, self.total)
            if len(where) >= 2:
                self.twice.setdefault(name, now)
                if self.thawed_at is not None:
                    self.twice_after_thaw.add(name)
        else:
            where.discard(worker)
            self.stopped.append((now, name, worker))
            self.per_worker[worker] -= 1
            self.total -= 1
        self.timeline.append((now, self.total))

    def thawed(self) -> None:
        """From now on every worker is reachable again: overlaps now seen count apart."""
        self.thawed_at = time.monotonic()
        self.twice_after_thaw.update(n for n, w in self.running.items() if len(w) >= 2)

    def on_two_or_more(self) -> list[str]:
        return sorted(n for n, w in self.running.items() if len(w) >= 2)

    def running_count(self) -> int:
        return sum(1 for w in self.running.values() if w)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
