"""Everything the controllers need to know of a job kind, behind one Protocol.

`JobKind` is the whole contract between the controllers and a kind of job: which
resource it is and how to tell a worker serves it, where its runtime lives and what it
demands, how to build a mirror and tell ours apart, which status to copy back, and
whether a mirror runs, finished, failed or was evicted by the worker. `TrainJobKind`
(`kinds/trainjob.py`) implements it for Kubeflow TrainJobs; a second kind (JobSet,
batch/Job) is one more module implementing the same methods.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Protocol

from dispatcher.kube.resource import ResourceKind
from dispatcher.placement.options import DemandMode

JSON = dict[str, Any]


class JobKind(Protocol):
    kind: ResourceKind
    """The resource on the manager and, for its mirrors, on every worker."""
    status_fields: tuple[str, ...]
    """The status fields copied from the mirror to the manager."""
    runtime_resources: dict[str, ResourceKind]
    """The runtime kinds `runtime_ref` names, and their resources: watched on the
    manager and on every worker (the worker's copy is the one that runs)."""

    def probe_path(self) -> str:
        """A GET that answers only when a worker serves this kind."""
        ...

    def runtime_ref(self, job: JSON) -> tuple[str, str] | None:
        """(runtime kind, cache key) of the job's runtime; None when it needs none."""
        ...

    def demand(self, job: JSON, runtime: JSON, parsed_runtime: Any, *,
               mode: DemandMode) -> dict[str, Fraction]:
        """What the job needs with its runtime; raises `DemandError` naming what is wrong."""
        ...

    def parse_runtime(self, runtime: JSON) -> Any:
        """The runtime parsed once per version (passed back to `demand`)."""
        ...

    def pods_priority_class(self, parsed_runtime: Any) -> str:
        """The Kubernetes PriorityClass the job's pods name in its runtime ("" for none)."""
        ...

    def build_mirror(self, job: JSON, *, origin: str, local_queue: str) -> JSON: ...
    def is_ours(self, remote: JSON, *, manager_uid: str | None, origin: str) -> bool: ...
    def remote_status(self, remote: JSON) -> JSON: ...

    def finished(self, status: JSON | None) -> JSON | None:
        """The True condition that ends the job (Complete or Failed), else None."""
        ...

    def failed(self, finished: JSON) -> bool: ...

    def running(self, remote: JSON | None) -> bool:
        """Whether the job runs, read from its status: a mirror's, or a manager job's (a
        copy of its mirror's). The one "running" rule: the metrics, the status page and
        the CLI all ask it."""
        ...

    def suspended(self, remote: JSON) -> bool:
        """Whether the mirror is held from running (by the worker's Kueue, until it
        admits it)."""
        ...

    def evicted_remotely(self, remote: JSON) -> str | None: ...

    pods_owner: ResourceKind
    """What a mirror makes its pods through (a JobSet for a TrainJob), of the mirror's
    name: read to prove which pods are the mirror's (for their logs)."""

    def pods_selector(self, mirror: JSON, *, replicated_job: str | None = None,
                      node_rank: int | None = None) -> str:
        """The label selector of the mirror's pods (of one replicated job, one rank)."""
        ...

    def pods_of(self, mirror: JSON, owner: JSON | None, pods: list[JSON]) -> list[JSON]:
        """Those of `pods` the mirror made through `owner`, in order of `pod_place`."""
        ...

    def pod_place(self, pod: JSON) -> tuple[str, int]:
        """(replicated job, node rank) of one of the mirror's pods."""
        ...

    def failed_condition(self, reason: str, message: str, now: str) -> JSON:
        """The condition that marks a manager job failed by the dispatcher."""
        ...

    def suspended_condition(self, status: JSON | None, now: str) -> JSON:
        """The condition a suspended manager job shows while no mirror runs it (keeping
        the transition time of the one in `status`)."""
        ...

