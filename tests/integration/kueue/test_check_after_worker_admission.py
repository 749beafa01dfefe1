"""Kueue on the manager and on the worker: with `admissionCheck.readyWhen: WorkerAdmitted`
our check stays Pending, saying where the job waits, until the worker's Kueue admits the
mirror; only then is it Ready and the manager job unsuspended.

On the shared Kueue plane: its manager runs Kueue (MultiKueue there serves only its own
checks), the dispatcher serves an AdmissionCheck of its own there, and worker-a's Kueue
has too little quota for the job until the test grows it.
"""

from __future__ import annotations

from typing import Any

import pytest

from devkit.factories import trainjob
from devkit.localcluster.kueue_objects import (
    ADMISSION_CHECKS,
    API_VERSION,
    FIELD_MANAGER,
    WORKLOADS,
    setup_queues,
    wait_active,
)
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.resource import Resource
from tests.integration.conftest import DispatcherRunner, eventually
from tests.integration.kueue.conftest import MANAGER, KueueClusters, is_true
from tests.integration.kueue.helpers import LOCAL_QUEUE, queues, worker

pytestmark = pytest.mark.integration
CONTROLLER = "dispatcher.trainjob.io/multicluster"
JOB = {"requests": {"cpu": "2", "memory": "1Gi"}}


async def our_check(kueue_clusters: KueueClusters, ns: str) -> dict[str, Any]:
    listed = await Resource(kueue_clusters.clients[MANAGER], WORKLOADS).list(namespace=ns)
    for workload in listed["items"]:
        for entry in (workload.get("status") or {}).get("admissionChecks") or []:
            if entry["name"] == ns:
                return {**entry, "workload": workload}
    return {}


async def test_the_check_is_ready_once_the_workers_kueue_admits_the_mirror(
        kueue_clusters: KueueClusters, kueue_namespace: str) -> None:
    ns = kueue_namespace
    manager = kueue_clusters.clients[MANAGER]
    await Resource(manager, ADMISSION_CHECKS).apply({
        "apiVersion": API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": ns},
        "spec": {"controllerName": CONTROLLER}}, field_manager=FIELD_MANAGER)
    await setup_queues(manager, cluster_queue_name=f"cq-{ns}", local_queue_name=LOCAL_QUEUE,
                       namespaces=[ns], quota={"cpu": "64", "memory": "256Gi"},
                       admission_check=ns)
    too_small = {"cpu": "1", "memory": "8Gi"}
    await queues(kueue_clusters, "worker-a", ns, too_small)
    runner = DispatcherRunner(kueue_clusters.plane, ns)
    try:
        await runner(manager_kubeconfig=kueue_clusters.plane.clusters[MANAGER].kubeconfig(),
                     admissionCheck={"controllerName": CONTROLLER, "readyWhen": "WorkerAdmitted"},
                     workers={"static": [worker(kueue_clusters, "worker-a",
                                                localQueue=LOCAL_QUEUE)]})
        await wait_active(manager, ADMISSION_CHECKS, [ns])
        await Resource(manager, TRAINJOBS).create(trainjob(
            "waits", ns, managed_by=MANAGED_BY_MULTIKUEUE, num_nodes=1, resources_per_node=JOB,
            labels={c.LABEL_KUEUE_QUEUE: LOCAL_QUEUE}), namespace=ns)

        async def waiting_on_worker() -> dict[str, Any] | None:
            check = await our_check(kueue_clusters, ns)
            return (check if check.get("state") == "Pending"
                    and "waiting for admission" in check.get("message", "") else None)
        check = await eventually(waiting_on_worker, timeout=60, interval=0.3)
        assert "worker-a" in check["message"], check
        mirror = await Resource(kueue_clusters.clients["worker-a"], TRAINJOBS).get(
            "waits", namespace=ns)
        assert mirror is not None and mirror["spec"].get("suspend") is True
        job = await Resource(manager, TRAINJOBS).get("waits", namespace=ns)
        assert job is not None and job["spec"].get("suspend") is True
        assert not is_true(check["workload"], "Admitted")

        await queues(kueue_clusters, "worker-a", ns, {"cpu": "4", "memory": "8Gi"})

        async def ready() -> dict[str, Any] | None:
            check = await our_check(kueue_clusters, ns)
            return check if check.get("state") == "Ready" else None
        check = await eventually(ready, timeout=60, interval=0.3)
        assert "worker-a" in check["message"]

        async def complete() -> dict[str, Any] | None:
            job = await Resource(manager, TRAINJOBS).get("waits", namespace=ns)
            return job if is_true(job, "Complete") else None
        job = await eventually(complete, timeout=60, interval=0.3)
        assert job["spec"].get("suspend") is False
    finally:
        await runner.stop()
