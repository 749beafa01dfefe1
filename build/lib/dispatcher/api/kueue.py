"""The Kueue and scheduling resources the dispatcher reads, and the names it writes there.

Everything is read as `v1beta2`, the one version Kueue serves from 0.20 on (0.15 to
0.19 serve it beside `v1beta1`): a worker's ClusterQueues, Workloads and
WorkloadPriorityClasses, the manager's WorkloadPriorityClasses and, with
`admissionCheck.controllerName` set, the manager's AdmissionChecks and Workloads; there
the dispatcher writes two things: the `Active` condition of the AdmissionChecks naming
its controller, and its own entry of each Workload's `status.admissionChecks` (state
`Pending`, `Ready`, `Retry` or `Rejected`).
"""

from __future__ import annotations

from typing import Any

from dispatcher.kube.resource import ResourceKind

CLUSTER_QUEUES = ResourceKind("kueue.x-k8s.io", "v1beta2", "clusterqueues", namespaced=False)
WORKLOADS = ResourceKind("kueue.x-k8s.io", "v1beta2", "workloads", namespaced=True)
WORKLOAD_PRIORITY_CLASSES = ResourceKind("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses",
                                         namespaced=False)
PRIORITY_CLASSES = ResourceKind("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
ADMISSION_CHECKS = ResourceKind("kueue.x-k8s.io", "v1beta2", "admissionchecks",
                                namespaced=False)

# A Workload's admission check states (status.admissionChecks[].state).
CHECK_PENDING = "Pending"
CHECK_READY = "Ready"
CHECK_RETRY = "Retry"
"""Kueue evicts the Workload, releases its quota and requeues it (the check is reset to
Pending)."""
CHECK_REJECTED = "Rejected"
"""Kueue deactivates the Workload: it is not queued again until someone reactivates it."""

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""Kueue's label on a Workload: the UID of the job it was made for."""

# A Workload's condition types.
WORKLOAD_QUOTA_RESERVED = "QuotaReserved"
WORKLOAD_EVICTED = "Evicted"
WORKLOAD_FINISHED = "Finished"
EVICTED_BY_REJECTED_CHECK = "DeactivatedDueToAdmissionCheck"
"""The Evicted reason of a Workload that Kueue deactivated because a check was Rejected
(Kueue then resets the check to Pending; its event on the Workload keeps our message)."""


WORKLOADS_BY_JOB = "job-uid"
"""The name of the Workload informers' index by `job_uid_of`."""


def job_uid_of(workload: dict[str, Any]) -> str | None:
    """The UID of the job a Workload was made for: its controller owner's."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return None
