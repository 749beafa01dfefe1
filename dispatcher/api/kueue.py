"""The Kueue and scheduling resources the dispatcher reads (never writes)."""

from __future__ import annotations

from dispatcher.kube.resource import ResourceKind

CLUSTER_QUEUES = ResourceKind("kueue.x-k8s.io", "v1beta1", "clusterqueues", namespaced=False)
WORKLOAD_PRIORITY_CLASSES = ResourceKind("kueue.x-k8s.io", "v1beta1", "workloadpriorityclasses",
                                         namespaced=False)
PRIORITY_CLASSES = ResourceKind("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
