"""The WorkerCluster resource (`dispatcher.trainjob.io/v1alpha1`) and a worker's spec.

`WorkerSpec` is what the dispatcher needs to know of a worker, whichever way it was
registered: a WorkerCluster object plus its Secret, or an entry of the config file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dispatcher.api.constants import PREFIX
from dispatcher.kube.resource import ResourceKind

WORKER_CLUSTERS = ResourceKind(PREFIX, "v1alpha1", "workerclusters", namespaced=False)
API_VERSION = f"{PREFIX}/v1alpha1"
DEFAULT_SECRET_KEY = "kubeconfig"


@dataclass(frozen=True)
class ConfigProblem:
    """Why a worker's configuration cannot be used (a reason constant and a message)."""

    reason: str
    message: str


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    kubeconfig: dict[str, Any] | None
    problem: ConfigProblem | None = None
    quota: dict[str, Fraction] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    local_queue: str = ""
    cluster_queue: str = ""
    cordoned: bool = False
    drain: bool = False
    from_crd: bool = True

    def connection_fields(self) -> tuple[Any, ...]:
        """What forces a new connection when it changes (the queues decide whether the
        worker's Kueue is watched)."""
        return (repr(self.kubeconfig), self.problem, self.local_queue, self.cluster_queue)
