"""Real local Kubernetes control plane (etcd + kube-apiserver) for the demo and tests."""

from devkit.localcluster.cluster import ControlPlaneError, LocalCluster, LocalControlPlane

__all__ = ["ControlPlaneError", "LocalCluster", "LocalControlPlane"]
