"""The invariants every fault test checks afterwards, read from the real clusters.

- every claimed TrainJob is placed on at most one worker and has at most one live mirror,
  on that worker;
- a finished job holds no finalizer and has no mirror left (mirrors are not kept);
- the quota booked on each worker (the demand annotations) never exceeds its quota;
- nothing waits in silence: an unplaced, unfinished, unsuspended job says why it waits.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource
from dispatcher.placement import resources


def _finished(job: dict[str, Any]) -> bool:
    return any(x["type"] in ("Complete", "Failed") and x["status"] == "True"
               for x in (job.get("status") or {}).get("conditions") or [])


async def check_invariants(clients: dict[str, ClusterClient], namespace: str, *,
                           workers: dict[str, dict[str, str]], origin: str) -> list[str]:
    """Return the violations found (empty when all invariants hold)."""
    problems: list[str] = []
    manager_jobs = (await Resource(clients["manager"], TRAINJOBS).list(
        namespace=namespace))["items"]
    mirrors: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for worker in workers:
        for item in (await Resource(clients[worker], TRAINJOBS).list(
                namespace=namespace, label_selector=f"{c.LABEL_ORIGIN}={origin}"))["items"]:
            mirrors.setdefault(item["metadata"]["name"], []).append((worker, item))
    booked: dict[str, dict[str, Fraction]] = {w: {} for w in workers}
    for job in manager_jobs:
        if (job.get("spec") or {}).get("managedBy") != MANAGED_BY_MULTIKUEUE:
            continue
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        annotations = job["metadata"].get("annotations") or {}
        placed = annotations.get(c.ANNOTATION_CLUSTER)
        has_finalizer = c.FINALIZER in (job["metadata"].get("finalizers") or [])
        live = [(w, m) for w, m in mirrors.get(name, [])
                if (m["metadata"].get("annotations") or {}).get(c.ANNOTATION_MANAGER_UID) == uid]
        if len(live) > 1:
            problems.append(f"{name}: {len(live)} live mirrors on {[w for w, _ in live]}")
        if _finished(job):
            if has_finalizer or live:
                problems.append(f"{name}: finished but finalizer={has_finalizer} mirrors={live}")
            continue
        if placed and has_finalizer:
            if any(w != placed for w, _ in live):
                problems.append(f"{name}: placed on {placed}, mirror on {[w for w, _ in live]}")
            booked[placed] = resources.add(booked.get(placed, {}), resources.parse_vector_text(
                annotations.get(c.ANNOTATION_DEMAND, "")))
    for worker, quota in workers.items():
        if not resources.fits(booked.get(worker, {}), resources.parse_vector(quota)):
            problems.append(f"{worker}: booked {booked[worker]} exceeds quota {quota}")
    for job in manager_jobs:
        annotations = job["metadata"].get("annotations") or {}
        if ((job.get("spec") or {}).get("managedBy") != MANAGED_BY_MULTIKUEUE
                or _finished(job) or annotations.get(c.ANNOTATION_CLUSTER)
                or (job.get("spec") or {}).get("suspend")):
            continue
        name = job["metadata"]["name"]
        waiting = [x for x in (job.get("status") or {}).get("conditions") or []
                   if x["type"] == c.CONDITION_DISPATCHED and x["status"] == "False"]
        if not waiting:
            problems.append(f"{name}: unplaced without a reason")
    return problems
