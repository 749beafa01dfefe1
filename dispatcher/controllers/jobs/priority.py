"""A job's priority: the value of the priority class its Kueue label names, cached briefly.

The label `kueue.x-k8s.io/priority-class` names a Kueue WorkloadPriorityClass or, when
none of that name exists, a Kubernetes PriorityClass; a job without it has priority 0.
The manager may not serve the WorkloadPriorityClass API at all, so the classes are read
on demand (a GET per class name at most every 30 s) rather than watched. The one
priority lookup: the scheduler's queue and `dispatcher jobs` both read it here.
"""

from __future__ import annotations

from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.kueue import PRIORITY_CLASSES, WORKLOAD_PRIORITY_CLASSES
from dispatcher.clock import Clock
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource

CACHE_SECONDS = 30.0


class PriorityCache:
    def __init__(self, manager: ClusterClient, *, clock: Clock) -> None:
        self._manager = manager
        self._clock = clock
        self._values: dict[str, tuple[int, float]] = {}

    async def priority(self, job: dict[str, Any]) -> int:
        name = (job["metadata"].get("labels") or {}).get(c.LABEL_PRIORITY_CLASS)
        if not name:
            return 0
        now = self._clock.monotonic()
        cached = self._values.get(name)
        if cached is not None and cached[1] > now:
            return cached[0]
        value = 0
        for kind in (WORKLOAD_PRIORITY_CLASSES, PRIORITY_CLASSES):
            found = await Resource(self._manager, kind).get(name)
            if found is not None:
                value = int(found.get("value") or 0)
                break
        self._values[name] = (value, now + CACHE_SECONDS)
        return value
