"""Shared fixtures: one real local control plane (a manager and two workers) per session.

Every cluster runs the real Kubeflow Trainer and JobSet controllers with their webhooks
and serves their CRDs as their modules ship them (and Kueue's); each worker also runs
kube-scheduler and kwok with nodes that hold its default quota, so a mirror really
becomes a JobSet, Jobs and pods on kwok nodes, and what a manager job shows is what the
worker's Trainer wrote. Every test gets namespaces of its own, so tests share the
clusters without seeing each other's objects; a test's namespaces are deleted after it,
which frees the nodes of its pods. The control plane is started once, on first use, and
stopped at the end of the session; its processes also die with the test process.

What the session needs and lacks is built on first use (the control plane, the Trainer
chain, Kueue); the build script's lines ("building kueue ... (first use of Kueue: about
3.5 minutes on 2 cores)", then how long it took) go to the terminal, not to pytest's
capture (`pytest_configure` below).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from devkit.localcluster import LocalCluster, LocalControlPlane, binaries
from devkit.localcluster.trainer import NodePool, chain_crd_files
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.resource import NAMESPACES, Resource, ResourceKind

CLUSTERS = ("manager", "worker-a", "worker-b")
WORKERS = CLUSTERS[1:]
WORKER_NODES = NodePool(count=4, allocatable={
    "cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "110"})
"""Each worker's kwok nodes: together they hold the tests' default quota."""
KUEUE_SERVED = "v1beta2"
"""Every test cluster serves Kueue's API at v1beta2 alone, as Kueue 0.20 and later do:
nothing the dispatcher reads from Kueue may need v1beta1."""
_ANSWERS_IN_A_ROW = 5


def pytest_configure(config: pytest.Config) -> None:
    """Builds run with pytest's capture suspended, so a first use that builds for minutes
    says what it builds and how long that usually takes, on the terminal, as it starts."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        return
    build = binaries._build

    def build_on_the_terminal(*args: str) -> Path:
        with capture.global_and_fixture_disabled():
            return build(*args)

    binaries._build = build_on_the_terminal


@pytest_asyncio.fixture(scope="session")
async def control_plane() -> AsyncIterator[LocalControlPlane]:
    plane = LocalControlPlane()
    try:
        await plane.start(CLUSTERS, controllers=CLUSTERS, crd_files=chain_crd_files(
            kueue=True, kueue_served=KUEUE_SERVED))
        for name in CLUSTERS:
            await plane.clusters[name].start_trainer(WORKER_NODES if name in WORKERS else None)
        yield plane
    finally:
        for cluster in plane.clusters.values():
            await cluster.stop_trainer()
        plane.stop()


@pytest.fixture(scope="session")
def manager(control_plane: LocalControlPlane) -> LocalCluster:
    return control_plane.clusters["manager"]


@pytest.fixture(scope="session")
def worker_a(control_plane: LocalControlPlane) -> LocalCluster:
    return control_plane.clusters["worker-a"]


@pytest.fixture(scope="session")
def worker_b(control_plane: LocalControlPlane) -> LocalCluster:
    return control_plane.clusters["worker-b"]


@pytest_asyncio.fixture(scope="session")
async def admin_clients(
    control_plane: LocalControlPlane,
) -> AsyncIterator[dict[str, ClusterClient]]:
    """A test-side admin client per cluster (not the dispatcher's own clients)."""
    clients = {
        name: await ClusterClient.from_kubeconfig(
            name=name,
            kubeconfig=cluster.kubeconfig(),
            settings=ClientSettings(qps=1000, burst=1000, timeout_seconds=10),
        )
        for name, cluster in control_plane.clusters.items()
    }
    yield clients
    for client in clients.values():
        await client.close()


async def until_answering(client: ClusterClient, kind: ResourceKind = NAMESPACES, *,
                          timeout: float = 30.0) -> None:
    """After an API server restart, wait until this client can list `kind` again: its
    pooled keep-alive connections died with the old process and fail once each, and a
    custom resource answers 429 while its storage re-initializes, which can happen again
    shortly after a first success while the server settles its many CRDs: so a few
    answers in a row are awaited."""
    deadline = asyncio.get_running_loop().time() + timeout
    in_a_row = 0
    while in_a_row < _ANSWERS_IN_A_ROW:
        try:
            await Resource(client, kind).list(limit=1)
            in_a_row += 1
        except Exception:
            in_a_row = 0
            if asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(0.2)


@pytest_asyncio.fixture
async def namespace(admin_clients: dict[str, ClusterClient]) -> AsyncIterator[str]:
    """A fresh namespace of the same name on every cluster."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    for client in admin_clients.values():
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    yield name
    for client in admin_clients.values():
        with contextlib.suppress(Exception):  # a test may have stopped a cluster
            await Resource(client, NAMESPACES).delete(name)
