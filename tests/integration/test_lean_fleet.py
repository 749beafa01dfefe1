"""A small fleet of lean workers, as `bench fleet` runs 50 of them: the dispatcher places
on every one, and a mirror's status reaches the manager.

Eight worker API servers started lean (`LEAN_APISERVER_FLAGS`: fewer API groups, no
watch cache, a memory limit for Go) beside a manager, over one etcd; no Trainer chain,
so the test writes a mirror's status as a trainer would.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.access import CRD_DIR
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import NAMESPACES, Resource
from tests.integration.conftest import (
    DispatcherRunner,
    connect_all,
    eventually,
    install_timed_runtime,
)

pytestmark = pytest.mark.integration
WORKERS = [f"lean-{i}" for i in range(8)]
RUNNING = [{"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 0,
            "suspended": 0}]


@pytest_asyncio.fixture(scope="module")
async def fleet() -> AsyncIterator[tuple[LocalControlPlane, dict[str, ClusterClient]]]:
    plane = LocalControlPlane()
    clients: dict[str, ClusterClient] = {}
    try:
        await plane.start(["manager"])
        await plane.start(WORKERS, lean=WORKERS, crd_files=sorted(CRD_DIR.glob("*.yaml")))
        clients = await connect_all(plane)
        await install_timed_runtime(clients, run_seconds=3600)
        yield plane, clients
    finally:
        for client in clients.values():
            await client.close()
        plane.stop()


async def test_the_dispatcher_places_on_every_lean_worker_and_syncs_status(
    fleet: tuple[LocalControlPlane, dict[str, ClusterClient]],
) -> None:
    plane, clients = fleet
    for worker in WORKERS:  # lean: the groups a worker does not need are not served
        with pytest.raises(ApiException) as missing:
            await clients[worker].request("GET", "/apis/batch/v1")
        assert missing.value.status == 404
    namespace = f"f-{uuid.uuid4().hex[:8]}"
    for client in clients.values():
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    runner = DispatcherRunner(plane, namespace)
    try:
        await runner(workers={"static": [
            {"name": w, "kubeconfig": str(plane.clusters[w].kubeconfig_path),
             "quota": {"cpu": "2", "memory": "8Gi"}} for w in WORKERS]})
        jobs = Resource(clients["manager"], TRAINJOBS)
        names = [f"job-{i}" for i in range(2 * len(WORKERS))]
        for name in names:
            await jobs.create(trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                       resources_per_node={"requests": {"cpu": "1"}}),
                              namespace=namespace)

        async def mirrors_by_worker() -> dict[str, list[str]] | None:
            found = {w: sorted(m["metadata"]["name"] for m in (await Resource(
                clients[w], TRAINJOBS).list(namespace=namespace))["items"]) for w in WORKERS}
            return found if sum(map(len, found.values())) == len(names) else None

        placed = await eventually(mirrors_by_worker, timeout=60, interval=0.5)
        assert all(len(on) == 2 for on in placed.values()), placed  # full, each of them
        worker, [name, _] = next(iter(placed.items()))
        await Resource(clients[worker], TRAINJOBS).merge_patch(
            name, {"status": {"jobsStatus": RUNNING}}, namespace=namespace,
            subresource="status")

        async def synced() -> dict[str, Any] | None:
            job = await jobs.get(name, namespace=namespace)
            return job if (job or {}).get("status", {}).get("jobsStatus") == RUNNING else None

        await eventually(synced, timeout=20)
    finally:
        await runner.stop()
