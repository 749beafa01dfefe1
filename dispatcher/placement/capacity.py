"""A worker's capacity: quota, used by this dispatcher, used by others, and free.

The one computation behind the scheduler's view, the WorkerCluster status, the CLI and
the metrics, so they never disagree.

- quota: the declared quota, capped per resource by the live nominal quota of the
  worker's Kueue ClusterQueue when one is named (`live_quota.effective_quota`); None
  means unlimited;
- used by us: what the ledger books on the worker;
- used by others: the ClusterQueue's live usage minus our mirrors that visibly run (their
  usage is already in the ledger); never below zero;
- free: quota minus both, per quota resource.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from dispatcher.placement import resources
from dispatcher.placement.live_quota import effective_quota

Vector = dict[str, Fraction]


@dataclass(frozen=True)
class Capacity:
    quota: Vector | None
    used_by_us: Vector = field(default_factory=dict)
    used_by_others: Vector = field(default_factory=dict)

    @property
    def used(self) -> Vector:
        return resources.add(self.used_by_us, self.used_by_others)

    @property
    def free(self) -> Vector | None:
        return None if self.quota is None else resources.remaining(self.quota, self.used)


def capacity(*, declared: Vector | None, live_quota: Vector | None, live_used: Vector | None,
             booked: Vector, booked_running: Vector) -> Capacity:
    """`booked`: the ledger's usage on the worker; `booked_running`: the part of it whose
    mirrors visibly run (and so are already in `live_used`)."""
    others: Vector = {}
    if live_used is not None:
        others = {name: amount for name, amount in
                  resources.subtract(live_used, booked_running).items() if amount > 0}
    return Capacity(quota=effective_quota(declared, live_quota),
                    used_by_us={k: v for k, v in booked.items() if v},
                    used_by_others=others)
