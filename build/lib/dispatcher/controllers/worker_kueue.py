"""One worker's Kueue as the dispatcher sees it: its ClusterQueues and its Workloads.

A worker whose registration names a `localQueue` or a `clusterQueue` runs Kueue. For
it, `WorkerKueue` watches every Workload on the worker (Kueue's own record of each job:
whether it is admitted, why it waits, whether it was evicted, what quota it holds) and,
when a ClusterQueue is named, lists the ClusterQueues on every probe (the named one and
its cohort). What the Workloads hold is kept per ClusterQueue as they change, so the
worker's room (`placement/capacity.queue_room`) costs no scan of them. The names of its
WorkloadPriorityClasses are listed on every probe too: a mirror whose priority class the
worker's Kueue lacks would never get a Workload there, so such a worker is not offered
the job (`placement/scheduler.py`).

A Workload belongs to the job its label `kueue.x-k8s.io/job-uid` names; for a mirror
that is the mirror's UID. Kueue names the job in the Workload's owner reference, so a
change of a Workload is reported as news about the job of that namespace and name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.kueue import (
    CLUSTER_QUEUES,
    JOB_UID_LABEL,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    WORKLOADS_BY_JOB,
    job_uid_of,
)
from dispatcher.clock import Clock
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import (
    DELETED,
    ConnectionHandler,
    Informer,
    InformerSettings,
    job_key,
    object_key,
)
from dispatcher.kube.resource import Resource
from dispatcher.placement import resources
from dispatcher.placement.live_quota import (
    QueueQuota,
    Reservation,
    parse_cluster_queue,
    reservation_of,
)
from dispatcher.placement.quantity import QuantityError

log = logging.getLogger(__name__)
JSON = dict[str, Any]
Vector = dict[str, Fraction]
WorkloadNews = Callable[[str], None]
"""Called with the `namespace/name` of the job a changed Workload belongs to."""


class QueueProblem(Exception):
    """The named ClusterQueue cannot be used; `reason` and the message say why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def summary(workload: JSON) -> JSON:
    """What the dispatcher reads of a Workload: its identity, owner, conditions and
    admission (not its pod templates, often most of its size)."""
    metadata = workload.get("metadata") or {}
    status = workload.get("status") or {}
    admission = status.get("admission") or {}
    kept: JSON = {
        "metadata": {k: metadata[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                              "ownerReferences") if k in metadata},
        "status": {"conditions": status.get("conditions") or []},
    }
    job_uid = (metadata.get("labels") or {}).get(JOB_UID_LABEL)
    if job_uid:
        kept["metadata"]["labels"] = {JOB_UID_LABEL: job_uid}
    if admission:
        kept["status"]["admission"] = {
            "clusterQueue": admission.get("clusterQueue", ""),
            "podSetAssignments": [{"resourceUsage": a.get("resourceUsage") or {}}
                                  for a in admission.get("podSetAssignments") or []]}
    return kept


def owner_key(workload: JSON) -> str | None:
    metadata = workload.get("metadata") or {}
    for ref in metadata.get("ownerReferences") or []:
        if ref.get("controller"):
            return job_key(metadata.get("namespace", ""), str(ref.get("name")))
    return None


class WorkerKueue:
    def __init__(self, client: ClusterClient, *, cluster_queue: str, worker: str,
                 settings: InformerSettings, on_connection: ConnectionHandler,
                 on_news: WorkloadNews, clock: Clock) -> None:
        self.cluster_queue = cluster_queue
        self.workloads = Informer(Resource(client, WORKLOADS), settings=settings,
                                  on_connection=on_connection, name=f"{worker}/workloads",
                                  transform=summary, clock=clock,
                                  indexes={WORKLOADS_BY_JOB: job_uid_of})
        self.workloads.add_handler(self._on_workload)
        self.queues: dict[str, QueueQuota] = {}
        self._client = client
        self._on_news = on_news
        self._held: dict[str, Reservation] = {}
        """Workload key -> the quota it holds, for the Workloads that hold any."""
        self.reserved: dict[str, Vector] = {}
        """ClusterQueue -> what its Workloads hold."""
        self.priority_classes: frozenset[str] | None = None
        """Names of the worker's WorkloadPriorityClasses; None until listed."""

    async def run(self) -> None:
        await self.workloads.run()

    @property
    def synced(self) -> bool:
        return self.workloads.synced.is_set()

    def workload_of(self, job_uid: str) -> JSON | None:
        found = self.workloads.indexed(WORKLOADS_BY_JOB, job_uid)
        return found[0] if found else None

    def reservation_of(self, job_uid: str) -> Reservation | None:
        workload = self.workload_of(job_uid)
        return self._held.get(object_key(workload)) if workload is not None else None

    def _on_workload(self, event_type: str, workload: JSON) -> None:
        key = object_key(workload)
        previous = self._held.pop(key, None)
        if previous is not None:
            self.reserved[previous.cluster_queue] = resources.subtract(
                self.reserved.get(previous.cluster_queue, {}), previous.usage)
        if event_type != DELETED:
            try:
                held = reservation_of(workload)
            except QuantityError as error:
                log.warning("workload %s: unreadable resourceUsage (%s)", key, error)
                held = None
            if held is not None:
                self._held[key] = held
                self.reserved[held.cluster_queue] = resources.add(
                    self.reserved.get(held.cluster_queue, {}), held.usage)
        job = owner_key(workload)
        if job is not None:
            self._on_news(job)

    async def refresh_priority_classes(self) -> bool:
        """List the WorkloadPriorityClasses' names; True when they changed."""
        listed = await Resource(self._client, WORKLOAD_PRIORITY_CLASSES).list()
        names = frozenset(obj["metadata"]["name"] for obj in listed.get("items") or [])
        changed = names != self.priority_classes
        self.priority_classes = names
        return changed

    async def refresh_queues(self) -> bool:
        """List the ClusterQueues; True when they changed. QueueProblem when the named one
        is missing, inactive or unreadable."""
        listed = await Resource(self._client, CLUSTER_QUEUES).list()
        queues: dict[str, QueueQuota] = {}
        problem: QueueProblem | None = None
        for obj in listed.get("items") or []:
            name = obj["metadata"]["name"]
            try:
                queues[name] = parse_cluster_queue(obj)
            except (QuantityError, KeyError, TypeError) as error:
                if name == self.cluster_queue:
                    problem = QueueProblem(c.REASON_BAD_QUOTA,
                                           f"ClusterQueue {name!r} quota unreadable: {error}")
        changed = queues != self.queues
        self.queues = queues
        if problem is not None:
            raise problem
        queue = queues.get(self.cluster_queue)
        if queue is None:
            raise QueueProblem(c.REASON_MISSING_CLUSTER_QUEUE,
                               f"ClusterQueue {self.cluster_queue!r} not found on the worker")
        if not queue.active:
            raise QueueProblem(c.REASON_INACTIVE_CLUSTER_QUEUE,
                               f"ClusterQueue {self.cluster_queue!r} is not active: "
                               f"{queue.inactive_message}")
        return changed

    def uncovered(self, declared: Vector | None) -> list[str]:
        """Resources of the declared quota the named ClusterQueue does not cover."""
        queue = self.queues.get(self.cluster_queue)
        if queue is None or declared is None:
            return []
        return sorted(name for name in declared if name not in queue.nominal)
