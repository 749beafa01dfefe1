"""The Kueue and scheduling resources the dispatcher reads (never writes).

A worker's queues and Workloads are read as `v1beta2` (Kueue 0.15 and later); priority
classes on the manager as `v1beta1`, which every Kueue release still serves.
"""

from __future__ import annotations

from dispatcher.kube.resource import ResourceKind

CLUSTER_QUEUES = ResourceKind("kueue.x-k8s.io", "v1beta2", "clusterqueues", namespaced=False)
WORKLOADS = ResourceKind("kueue.x-k8s.io", "v1beta2", "workloads", namespaced=True)
WORKLOAD_PRIORITY_CLASSES = ResourceKind("kueue.x-k8s.io", "v1beta1", "workloadpriorityclasses",
                                         namespaced=False)
PRIORITY_CLASSES = ResourceKind("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
