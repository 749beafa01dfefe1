"""A worker's live quota from its Kueue ClusterQueue, and how it combines with the ledger.

A ClusterQueue's nominal quota is summed over its flavors per resource
(`spec.resourceGroups[].flavors[].resources[].nominalQuota`), its usage likewise from
`status.flavorsUsage[].resources[].total`.

Effective quota of a worker: the declared quota, the live nominal quota, or, when both
are known, the smaller of the two per resource. How the live usage combines with the
ledger is `placement/capacity.py`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dispatcher.placement import resources
from dispatcher.placement.quantity import parse_quantity

Vector = dict[str, Fraction]


def cluster_queue_quota(cluster_queue: dict[str, Any]) -> tuple[Vector, Vector]:
    """(nominal quota, usage) of a ClusterQueue object, summed over flavors."""
    nominal: Vector = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                nominal = resources.add(nominal, {res["name"]: parse_quantity(res["nominalQuota"])})
    used: Vector = {}
    for flavor in (cluster_queue.get("status") or {}).get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            used = resources.add(used, {res["name"]: parse_quantity(res.get("total", 0))})
    return nominal, used


def effective_quota(declared: Vector | None, live: Vector | None) -> Vector | None:
    if live is None:
        return declared
    if declared is None:
        return dict(live)
    return {name: min(amount, declared[name]) for name, amount in live.items() if name in declared}

