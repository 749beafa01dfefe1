"""The local control plane itself: real API servers that serve the Trainer CRDs."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.localcluster import LocalCluster, LocalControlPlane
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.resource import NAMESPACES, Resource, message_of
from tests.conftest import until_answering

pytestmark = pytest.mark.integration


async def test_three_clusters_serve_trainjobs_and_their_status(
    control_plane: LocalControlPlane, admin_clients: dict[str, ClusterClient], namespace: str,
    runtime_installed: dict[str, Any],
) -> None:
    assert {"manager", "worker-a", "worker-b"} <= set(control_plane.clusters)
    for name, client in admin_clients.items():
        jobs = Resource(client, TRAINJOBS)
        created = await jobs.create(trainjob("job-1", namespace), namespace=namespace)
        assert created["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"
        read = await jobs.get("job-1", namespace=namespace)
        assert read is not None and read["metadata"]["uid"] == created["metadata"]["uid"]
        condition = {
            "type": "Complete", "status": "True", "reason": "AllJobsCompleted",
            "message": f"done on {name}", "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        await jobs.merge_patch(
            "job-1", {"status": {"conditions": [condition]}},
            namespace=namespace, subresource="status",
        )
        read = await jobs.get("job-1", namespace=namespace)
        assert read is not None
        assert read["status"]["conditions"][0]["message"] == f"done on {name}"
        listed = await jobs.list(namespace=namespace)
        assert [i["metadata"]["name"] for i in listed["items"]] == ["job-1"]


async def test_clusters_do_not_share_objects(
    admin_clients: dict[str, ClusterClient], namespace: str,
    runtime_installed: dict[str, Any],
) -> None:
    await Resource(admin_clients["worker-a"], TRAINJOBS).create(
        trainjob("only-on-a", namespace), namespace=namespace
    )
    assert await Resource(admin_clients["worker-b"], TRAINJOBS).get(
        "only-on-a", namespace=namespace) is None


async def test_crd_rejects_unknown_managed_by(
    admin_clients: dict[str, ClusterClient], namespace: str,
    runtime_installed: dict[str, Any],
) -> None:
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    with pytest.raises(ApiException) as raised:
        await jobs.create(trainjob("bad", namespace, managed_by="example.com/other"),
                          namespace=namespace)
    assert raised.value.status == 422
    assert "ManagedBy must be" in message_of(raised.value)


async def test_crd_rejects_changing_managed_by(
    admin_clients: dict[str, ClusterClient], namespace: str,
    runtime_installed: dict[str, Any],
) -> None:
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    await jobs.create(trainjob("claimed", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                      namespace=namespace)
    with pytest.raises(ApiException) as raised:
        await jobs.merge_patch(
            "claimed", {"spec": {"managedBy": "trainer.kubeflow.org/trainjob-controller"}},
            namespace=namespace,
        )
    assert raised.value.status == 422
    assert "immutable" in message_of(raised.value)


async def test_crd_rejects_bad_names_and_empty_status(
    admin_clients: dict[str, ClusterClient], namespace: str,
    runtime_installed: dict[str, Any],
) -> None:
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    with pytest.raises(ApiException) as raised:
        await jobs.create(trainjob("1-starts-with-digit", namespace), namespace=namespace)
    assert "RFC 1035" in message_of(raised.value)
    # managedBy: no trainer writes this job's status, so it stays absent until patched
    await jobs.create(trainjob("no-status", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                      namespace=namespace)
    with pytest.raises(ApiException) as raised:
        await jobs.merge_patch("no-status", {"status": {}}, namespace=namespace,
                               subresource="status")
    assert raised.value.status == 422


async def test_paused_cluster_times_out_and_answers_after_resume(
    worker_b: LocalCluster,
) -> None:
    client = await ClusterClient.from_kubeconfig(
        name=worker_b.name, kubeconfig=worker_b.kubeconfig(),
        settings=ClientSettings(timeout_seconds=1.0),
    )
    namespaces = Resource(client, NAMESPACES)
    try:
        assert await namespaces.get("default") is not None
        worker_b.pause()
        started = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await namespaces.get("default")
        elapsed = time.monotonic() - started
        assert 0.9 <= elapsed < 5
        worker_b.resume()
        assert await namespaces.get("default") is not None
    finally:
        worker_b.resume()
        await client.close()


async def test_restarted_cluster_keeps_its_objects(
    worker_a: LocalCluster, admin_clients: dict[str, ClusterClient], namespace: str,
    runtime_installed: dict[str, Any],
) -> None:
    jobs = Resource(admin_clients["worker-a"], TRAINJOBS)
    created = await jobs.create(trainjob("survivor", namespace), namespace=namespace)
    old_pid = worker_a.apiserver.pid
    await worker_a.restart()
    assert worker_a.apiserver.pid != old_pid
    await until_answering(admin_clients["worker-a"], TRAINJOBS)
    read = await jobs.get("survivor", namespace=namespace)
    assert read is not None and read["metadata"]["uid"] == created["metadata"]["uid"]


async def test_stopping_leaves_no_process_behind() -> None:
    plane = LocalControlPlane()
    await plane.start(["lonely"], controllers=["lonely"])
    pids = [p.pid for p in plane.processes()]
    assert len(pids) == 3 and all(pids)
    plane.stop()
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not plane.directory.exists()
