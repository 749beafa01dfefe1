"""What the components run beside a local API server (Kueue, the Trainer chain, the CRD
installer) need of it: its name, files, PKI and an admin client; and free local ports.

A leaf module: `cluster.py` starts the components, which see the cluster only through
`ServedCluster`, so neither imports the other's module back."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Protocol

from devkit.localcluster.pki import CertificateFiles
from devkit.localcluster.processes import ManagedProcess
from dispatcher.kube.client import ClientSettings, ClusterClient

REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = REPO_ROOT / "config" / "crd"
"""The project's CRDs (the dispatcher's own, and the TrainJob CRDs generated from the
Python models for the clusters that do not run the real Trainer)."""


class ServedCluster(Protocol):
    """A running local API server, as the processes started beside it see it."""

    name: str
    directory: Path
    certs: CertificateFiles
    binaries: Path
    apiserver: ManagedProcess
    kubeconfig_path: Path

    def kubeconfig(self) -> dict[str, Any]: ...


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def admin_client(cluster: ServedCluster, *, timeout: float = 30.0) -> ClusterClient:
    return await ClusterClient.from_kubeconfig(
        name=cluster.name,
        kubeconfig=cluster.kubeconfig(),
        settings=ClientSettings(qps=1000, burst=1000, timeout_seconds=timeout),
    )
