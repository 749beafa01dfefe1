"""A job's priority, from sources a namespace user cannot abuse, and why it is that.

As Kueue decides a Workload's priority:

- the label `kueue.x-k8s.io/priority-class` names a Kueue `WorkloadPriorityClass`, and
  only that (a label naming any other kind of class, or none that exists, gives 0:
  a user who labels a job `system-cluster-critical` gains nothing);
- without the label, the Kubernetes `PriorityClass` its pods name (`priorityClassName`
  in the runtime's pod templates; a TrainJob's runtime patches cannot set it) counts,
  where the API server would let the job's namespace run such pods: the system classes
  (`system-*`) only in `kube-system`, as kube-apiserver allows by default;
- otherwise 0.

The classes are admins' objects: both kinds are listed at most every `CACHE_SECONDS`
when asked (the manager may not serve the WorkloadPriorityClass API: none then), so the
cache holds what exists in the cluster, never an entry per name a user wrote. The one
priority lookup: the scheduler's queue and `dispatcher jobs` both read it here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api.kueue import PRIORITY_CLASSES, WORKLOAD_PRIORITY_CLASSES
from dispatcher.clock import Clock
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource, ResourceKind

CACHE_SECONDS = 30.0
SYSTEM_PREFIX = "system-"
SYSTEM_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class Priority:
    value: int
    why: str = ""
    """Where the value comes from, in words; empty when the job names no class."""


NO_PRIORITY = Priority(0)


def priority_of(*, label: str, pods_class: str, namespace: str,
                workload_classes: dict[str, int], pod_classes: dict[str, int]) -> Priority:
    """The pure rule: the job's label, else its pods' class, against the classes that
    exist (name -> value)."""
    if label:
        if label in workload_classes:
            value = workload_classes[label]
            return Priority(value, f"WorkloadPriorityClass {label!r} of its "
                                   f"{c.LABEL_PRIORITY_CLASS} label")
        return Priority(0, f"its {c.LABEL_PRIORITY_CLASS} label names {label!r}, which is "
                           "no WorkloadPriorityClass (the label names only those)")
    if not pods_class:
        return Priority(0)
    if pods_class.startswith(SYSTEM_PREFIX) and namespace != SYSTEM_NAMESPACE:
        return Priority(0, f"its pods' PriorityClass {pods_class!r} is for {SYSTEM_NAMESPACE} "
                           "only")
    if pods_class not in pod_classes:
        return Priority(0, f"its pods' PriorityClass {pods_class!r} does not exist")
    return Priority(pod_classes[pods_class], f"its pods' PriorityClass {pods_class!r}")


class PriorityCache:
    def __init__(self, manager: ClusterClient, *, clock: Clock) -> None:
        self._manager = manager
        self._clock = clock
        self._workload_classes: dict[str, int] = {}
        self._pod_classes: dict[str, int] = {}
        self._fresh_until = float("-inf")

    async def _list(self, kind: ResourceKind) -> dict[str, int]:
        try:
            listed = await Resource(self._manager, kind).list()
        except ApiException as error:
            if error.status == 404:  # the API is not served here: no such classes
                return {}
            raise
        return {item["metadata"]["name"]: int(item.get("value") or 0)
                for item in listed.get("items") or []}

    async def _refresh(self) -> None:
        now = self._clock.monotonic()
        if now < self._fresh_until:
            return
        self._workload_classes = await self._list(WORKLOAD_PRIORITY_CLASSES)
        self._pod_classes = await self._list(PRIORITY_CLASSES)
        self._fresh_until = now + CACHE_SECONDS

    async def priority(self, job: dict[str, Any], *, pods_class: str = "") -> Priority:
        """The job's priority; `pods_class` is the PriorityClass its runtime's pods name."""
        metadata = job["metadata"]
        label = (metadata.get("labels") or {}).get(c.LABEL_PRIORITY_CLASS, "")
        if label or pods_class:
            await self._refresh()
        return priority_of(label=label, pods_class=pods_class,
                           namespace=metadata.get("namespace", ""),
                           workload_classes=self._workload_classes,
                           pod_classes=self._pod_classes)
