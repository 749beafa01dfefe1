"""The invariants every fault test checks afterwards, read from the real clusters.

- every claimed TrainJob has at most one live mirror, on the worker its placement
  record names;
- a finished job holds no finalizer and has no mirror left (mirrors are not kept);
- the quota booked on each worker (the placement records) never exceeds its quota;
- what really runs on each worker (its live mirrors' demand, computed from the workers'
  own objects: the mirror's spec and the worker's runtime) never exceeds its quota;
- the job's annotations agree with its record (they are a view of it);
- nothing waits in silence: an unplaced, unfinished, unsuspended job says why it waits.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS, record_of
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource
from dispatcher.placement import resources
from dispatcher.placement.options import DemandMode

KIND = TrainJobKind()


def _finished(job: dict[str, Any]) -> bool:
    return any(x["type"] in ("Complete", "Failed") and x["status"] == "True"
               for x in (job.get("status") or {}).get("conditions") or [])


async def live_mirror_demand(client: ClusterClient, namespace: str, *, origin: str
                             ) -> dict[str, Fraction]:
    """What the live (unfinished) mirrors on one worker need, from its own objects."""
    total: dict[str, Fraction] = {}
    runtimes: dict[tuple[str, str], Any] = {}
    for mirror in (await Resource(client, TRAINJOBS).list(
            namespace=namespace, label_selector=f"{c.LABEL_ORIGIN}={origin}"))["items"]:
        if _finished(mirror):
            continue
        kind, key = KIND.runtime_ref(mirror)
        if (kind, key) not in runtimes:
            runtimes[(kind, key)] = await Resource(client, _runtime_kind(kind)).get(
                key.rsplit("/", 1)[-1], namespace=namespace if "/" in key else None)
        runtime = runtimes[(kind, key)]
        if runtime is None:
            continue
        demand = KIND.demand(mirror, runtime, KIND.parse_runtime(runtime),
                             mode=DemandMode.SUM)
        total = resources.add(total, demand)
    return total


def _runtime_kind(kind: str) -> Any:
    from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES

    return CLUSTER_TRAINING_RUNTIMES if kind == "ClusterTrainingRuntime" else TRAINING_RUNTIMES


async def check_invariants(clients: dict[str, ClusterClient], namespace: str, *,
                           workers: dict[str, dict[str, str]], origin: str,
                           system_namespace: str | None = None) -> list[str]:
    """Return the violations found (empty when all invariants hold). The placement
    records are read from `system_namespace` (the tests' `<namespace>-system`)."""
    problems: list[str] = []
    manager_jobs = (await Resource(clients["manager"], TRAINJOBS).list(
        namespace=namespace))["items"]
    records = {record.uid: record for record in (record_of(item) for item in (
        await Resource(clients["manager"], PLACEMENTS).list(
            namespace=system_namespace or f"{namespace}-system"))["items"])}
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
        record = records.get(uid)
        placed = record.worker if record is not None and record.placed else None
        has_finalizer = c.FINALIZER in (job["metadata"].get("finalizers") or [])
        live = [(w, m) for w, m in mirrors.get(name, [])
                if (m["metadata"].get("annotations") or {}).get(c.ANNOTATION_MANAGER_UID) == uid]
        if len(live) > 1:
            problems.append(f"{name}: {len(live)} live mirrors on {[w for w, _ in live]}")
        if _finished(job):
            if has_finalizer or live:
                problems.append(f"{name}: finished but finalizer={has_finalizer} mirrors={live}")
            continue
        if any(w != placed for w, _ in live):
            problems.append(f"{name}: placed on {placed}, mirror on {[w for w, _ in live]}")
        if annotations.get(c.ANNOTATION_CLUSTER) != placed and not job["metadata"].get(
                "deletionTimestamp"):
            problems.append(f"{name}: annotation says {annotations.get(c.ANNOTATION_CLUSTER)},"
                            f" record says {placed}")
        if placed and record is not None:
            booked[placed] = resources.add(booked.get(placed, {}), record.demand)
    for worker, quota in workers.items():
        limit = resources.parse_vector(quota)
        if not resources.fits(booked.get(worker, {}), limit):
            problems.append(f"{worker}: booked {booked[worker]} exceeds quota {quota}")
        running = await live_mirror_demand(clients[worker], namespace, origin=origin)
        if not resources.fits(running, limit):
            problems.append(f"{worker}: live mirrors need {running}, over quota {quota}")
    for job in manager_jobs:
        uid = job["metadata"]["uid"]
        record = records.get(uid)
        if ((job.get("spec") or {}).get("managedBy") != MANAGED_BY_MULTIKUEUE
                or _finished(job) or (record is not None and record.placed)
                or (job.get("spec") or {}).get("suspend")):
            continue
        name = job["metadata"]["name"]
        waiting = [x for x in (job.get("status") or {}).get("conditions") or []
                   if x["type"] == c.CONDITION_DISPATCHED and x["status"] == "False"]
        if not waiting:
            problems.append(f"{name}: unplaced without a reason")
    return problems
