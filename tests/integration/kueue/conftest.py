"""Clusters that run real Kueue, shared by the Kueue tests of one session.

A control plane of its own, apart from the main plane whose workers run no Kueue: a
MultiKueue manager and two workers, each with the controller manager and a Kueue
manager (the manager's with MultiKueue on), a manager without Kueue for the
dispatcher, and the real Trainer and JobSet on every cluster, with kube-
scheduler and kwok nodes on each worker; the sample runtime's pods run for `RUN_SECONDS`
unless a job's own runtime patch says otherwise (`helpers.long_running`). The
dispatcher's manager has no Kueue because Kueue's TrainJob webhook adds its runtime
patch to every TrainJob there, which the mirror would carry to a worker whose Kueue adds
it again (a duplicate the API server rejects). Every test gets a namespace of its own on
every cluster and queues named after it, so tests share the clusters without sharing
quota.
If the Kueue binary cannot be found or built, the fixture fails: it never skips.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest_asyncio

from devkit.localcluster import LocalControlPlane
from devkit.localcluster.kueue import KueueSettings, MultiKueueSettings
from devkit.localcluster.trainer import chain_crd_files
from dispatcher.app import Dispatcher
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import NAMESPACES, Resource
from tests.conftest import KUEUE_SERVED, WORKER_NODES
from tests.integration.conftest import (
    DispatcherRunner,
    connect_all,
    install_timed_runtime,
    shut_down,
)

MANAGER = "manager"
DISPATCHER_MANAGER = "hub"
WORKERS = ("worker-a", "worker-b")
CLUSTERS = (MANAGER, DISPATCHER_MANAGER, *WORKERS)
RUN_SECONDS = 1.0


@dataclass
class KueueClusters:
    """The Kueue-enabled plane and a test-side admin client per cluster."""

    plane: LocalControlPlane
    clients: dict[str, ClusterClient]


async def _start_plane(plane: LocalControlPlane) -> None:
    await plane.start(CLUSTERS, controllers=CLUSTERS, crd_files=chain_crd_files(
        kueue=True, kueue_served=KUEUE_SERVED))
    for name in CLUSTERS:
        await plane.clusters[name].start_trainer(WORKER_NODES if name in WORKERS else None)
    manager_settings = KueueSettings(multikueue=MultiKueueSettings(gc_interval="5s"))
    await asyncio.gather(
        plane.clusters[MANAGER].start_kueue(manager_settings),
        *(plane.clusters[w].start_kueue() for w in WORKERS),
    )


@pytest_asyncio.fixture(scope="session")
async def kueue_clusters() -> AsyncIterator[KueueClusters]:
    plane = LocalControlPlane()
    clients: dict[str, ClusterClient] = {}
    try:
        await _start_plane(plane)
        clients = await connect_all(plane)
        await install_timed_runtime(clients, RUN_SECONDS)
        yield KueueClusters(plane=plane, clients=clients)
    finally:
        await shut_down(plane, clients)


@pytest_asyncio.fixture
async def kueue_namespace(kueue_clusters: KueueClusters) -> AsyncIterator[str]:
    """A fresh namespace of the same name on every Kueue cluster."""
    name = f"k-{uuid.uuid4().hex[:10]}"
    for client in kueue_clusters.clients.values():
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """An object's status conditions by type."""
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def is_true(obj: dict[str, Any] | None, type_: str) -> bool:
    return conditions(obj).get(type_, {}).get("status") == "True"


class HubDispatchers:
    """Starts dispatchers whose manager is the hub, and stops them (all, at the end)."""

    def __init__(self, runner: DispatcherRunner, hub: dict[str, Any]) -> None:
        self._runner = runner
        self._hub = hub

    async def __call__(self, **overrides: Any) -> Dispatcher:
        return await self._runner(manager_kubeconfig=self._hub, **overrides)

    async def stop(self, *dispatchers: Dispatcher) -> None:
        await self._runner.stop(*dispatchers)


@pytest_asyncio.fixture
async def dispatchers(kueue_clusters: KueueClusters, kueue_namespace: str
                      ) -> AsyncIterator[HubDispatchers]:
    runner = DispatcherRunner(kueue_clusters.plane, kueue_namespace)
    yield HubDispatchers(runner, kueue_clusters.plane.clusters[DISPATCHER_MANAGER].kubeconfig())
    await runner.stop()
