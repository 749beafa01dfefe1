"""MultiKueue, set up as its users do, runs a TrainJob to Complete on these clusters.

The peer benchmark measures MultiKueue on the same harness; this smoke test makes sure
it never silently measures a broken peer.
"""

from __future__ import annotations

from typing import Any

import pytest

from devkit.factories import trainjob
from devkit.localcluster.kueue_objects import WORKLOADS, setup_multikueue, setup_queues
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.resource import Resource
from tests.integration.conftest import eventually
from tests.integration.kueue.conftest import WORKERS, KueueClusters, conditions, is_true

pytestmark = pytest.mark.integration
QUOTA = {"cpu": "8", "memory": "64Gi"}


async def test_one_trainjob_through_multikueue_completes_on_the_manager(
    kueue_clusters: KueueClusters, kueue_namespace: str,
) -> None:
    ns = kueue_namespace
    clients = kueue_clusters.clients
    cq, lq, check = f"cq-{ns}", "team", f"mk-{ns}"
    await setup_multikueue(
        clients["manager"], config_name=f"mkc-{ns}", check_name=check,
        workers={w: kueue_clusters.plane.clusters[w].kubeconfig() for w in WORKERS})
    await setup_queues(clients["manager"], cluster_queue_name=cq, local_queue_name=lq,
                       namespaces=[ns], quota=QUOTA, admission_check=check)
    for worker in WORKERS:
        await setup_queues(clients[worker], cluster_queue_name=cq, local_queue_name=lq,
                           namespaces=[ns], quota=QUOTA)
    await Resource(clients["manager"], TRAINJOBS).create(
        trainjob("through-mk", ns, managed_by=MANAGED_BY_MULTIKUEUE,
                 labels={c.LABEL_KUEUE_QUEUE: lq}), namespace=ns)
    remote_on: set[str] = set()

    async def complete() -> dict[str, Any] | None:
        for worker in WORKERS:
            if await Resource(clients[worker], TRAINJOBS).get("through-mk", namespace=ns):
                remote_on.add(worker)
        job = await Resource(clients["manager"], TRAINJOBS).get("through-mk", namespace=ns)
        return job if is_true(job, "Complete") else None
    job = await eventually(complete, timeout=60, interval=0.1)
    assert job["spec"]["managedBy"] == MANAGED_BY_MULTIKUEUE
    assert remote_on, "no worker copy was ever seen"
    async def finished() -> dict[str, Any] | None:
        # Kueue marks the Workload Finished a moment after the job's Complete condition.
        listed = await Resource(clients["manager"], WORKLOADS).list(namespace=ns)
        (workload,) = listed["items"]
        return workload if is_true(workload, "Finished") else None
    workload = await eventually(finished, timeout=30, interval=0.1)
    checks = {s["name"]: s for s in workload["status"].get("admissionChecks") or []}
    assert checks[check]["state"] == "Ready", checks
    assert conditions(job)["Complete"]["status"] == "True"
