"""What the gauges and the status page read from a term: plain stand-ins for its parts."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from devkit.factories import condition, trainjob
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.api.workercluster import WorkerSpec
from dispatcher.claim import Claim
from dispatcher.config import ClaimConfig
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.informer import Informer
from dispatcher.kube.resource import Resource
from dispatcher.observability.termview import (
    BY_REASON,
    REASON_NEW,
    reading,
    reason_index,
    status_view_inputs,
)
from dispatcher.placement.capacity import Capacity
from dispatcher.placement.ledger import Booking, Ledger
from dispatcher.placement.scheduler import PendingJob
from tests.unit.fakes import FakeClient


@dataclass
class Worker:
    name: str
    spec: WorkerSpec
    mirrors: Informer | None = None
    is_usable: bool = True

    def usable(self) -> bool:
        return self.is_usable


def workers() -> list[Worker]:
    return [Worker("a", WorkerSpec(name="a", kubeconfig={}, cordoned=True)),
            Worker("b", WorkerSpec(name="b", kubeconfig={}), is_usable=False)]


def test_a_reading_takes_each_worker_and_the_queues() -> None:
    room = Capacity(quota={"cpu": Fraction(4)})
    ledger = Ledger()
    running = trainjob("run", "ns", managed_by=MANAGED_BY_MULTIKUEUE)
    running["status"] = {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}
    jobs = {"ns/run": running, "ns/wait": trainjob("wait", "ns")}
    for uid, key in (("u1", "ns/run"), ("u2", "ns/wait"), ("u3", "ns/gone")):
        ledger.book(Booking(uid, key, "a", {"cpu": Fraction(1)}))
    taken = reading(workers=workers(), capacity_of=lambda w: room, ledger=ledger, jobs=jobs,
                    kind=TrainJobKind(), pending=5, queue_depth=2,
                    reasons={"WaitingForQuota": 5})
    assert [(w.name, w.usable, w.placed, w.running, w.watch_restarts)
            for w in taken.workers] == [("a", True, 3, 1, None), ("b", False, 0, 0, None)]
    assert (taken.pending, taken.queue_depth) == (5, 2)


def test_claimed_unfinished_jobs_are_counted_by_their_dispatched_reason() -> None:
    waiting = trainjob("w", "ns", managed_by=MANAGED_BY_MULTIKUEUE)
    waiting["status"] = {"conditions": [condition(c.CONDITION_DISPATCHED,
                                                  c.REASON_WAITING_FOR_QUOTA, "", "False")]}
    done = trainjob("d", "ns", managed_by=MANAGED_BY_MULTIKUEUE)
    done["status"] = {"conditions": [condition("Complete", "AllJobsCompleted", "done")]}
    new = trainjob("n", "ns", managed_by=MANAGED_BY_MULTIKUEUE)
    stranger = trainjob("s", "ns")
    cache = Informer(Resource(FakeClient().as_client(), TRAINJOBS),
                     indexes=reason_index(claim=Claim(ClaimConfig()), kind=TrainJobKind()))
    for version, job in enumerate([waiting, done, new, stranger], start=1):
        job["metadata"]["resourceVersion"] = str(version)
        cache.remember(job)
    counted = cache.counts(BY_REASON)
    assert counted == {c.REASON_WAITING_FOR_QUOTA: 1, REASON_NEW: 1}


def test_the_status_view_is_built_from_what_was_taken() -> None:
    def desired(obj: dict[str, Any], worker: Worker) -> dict[str, Any]:
        return {"quota": {"cpu": "4"}}
    build = status_view_inputs(
        workers=workers(), registrations=None, desired_status=desired, jobs={},
        claim=Claim(ClaimConfig()), kind=TrainJobKind(),
        pending=[PendingJob(key="ns/j", uid="u", demand={}, priority=7)], events=[],
        placements={}, offset=0, limit=10)
    view = build()
    assert [(w.name, w.cordoned) for w in view.workers] == [("a", True), ("b", False)]
