"""With Kueue on the manager, a namespace user who may edit TrainJobs cannot get a job
dispatched that Kueue has not admitted: the gate is the Workload's status, Kueue's to
write. The user is a real client certificate bound by RBAC to TrainJobs in one namespace.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.localcluster.kueue_objects import ADMISSION_CHECKS, WORKLOADS, wait_active
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.resource import Resource
from tests.integration.conftest import DispatcherRunner, counted, eventually, reconciled
from tests.integration.kueue.admission.conftest import (
    LOCAL_QUEUE,
    WORKER,
    Plane,
    queues,
    start,
    workload_of,
)
from tests.integration.kueue.conftest import conditions
from tests.integration.rbac import namespace_editor

pytestmark = pytest.mark.integration
TOO_BIG_FOR_THE_QUEUE = {"requests": {"cpu": "2", "memory": "1Gi"}}


async def test_a_namespace_user_cannot_dispatch_what_kueue_holds(
        admission_plane: Plane, ns: str, dispatchers: DispatcherRunner) -> None:
    await queues(admission_plane, ns, quota={"cpu": "1", "memory": "8Gi"})
    dispatcher = await start(admission_plane, dispatchers)
    await wait_active(admission_plane.manager, ADMISSION_CHECKS, [ns])
    async with namespace_editor(admission_plane.plane, admission_plane.manager, ns) as user:
        jobs = Resource(user, TRAINJOBS)
        forged = trainjob("forged", ns, managed_by=MANAGED_BY_MULTIKUEUE, num_nodes=1,
                          resources_per_node=TOO_BIG_FOR_THE_QUEUE, suspend=False,
                          labels={c.LABEL_KUEUE_QUEUE: LOCAL_QUEUE},
                          annotations={c.ANNOTATION_CLUSTER: WORKER,
                                       c.ANNOTATION_DEMAND: "cpu=1,pods=1"})
        forged["metadata"]["finalizers"] = [c.FINALIZER]
        await jobs.create(forged, namespace=ns)

        async def held() -> dict[str, Any] | None:
            workload = await workload_of(admission_plane, ns, "forged")
            reserved = conditions(workload).get("QuotaReserved", {})
            return workload if reserved.get("status") == "False" else None
        workload = await eventually(held, timeout=30, interval=0.2)

        # Kueue's word is not the user's to write.
        with pytest.raises(ApiException) as refused:
            await Resource(user, WORKLOADS).merge_patch(
                workload["metadata"]["name"], {"status": {"conditions": [
                    {"type": "QuotaReserved", "status": "True", "reason": "Forged",
                     "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
                namespace=ns, subresource="status")
        assert refused.value.status == 403
        # Unsuspending the job Kueue suspended says nothing to the dispatcher either.
        before = counted(dispatcher, "dispatcher_reconciles_total")
        try:
            await jobs.merge_patch("forged", {"spec": {"suspend": False}}, namespace=ns)
        except ApiException as error:  # Kueue's webhook may refuse it outright
            assert error.status in (400, 403, 422), error
        await reconciled(dispatcher, int(before) + 1)

        async def told() -> dict[str, Any] | None:
            job = await jobs.get("forged", namespace=ns)
            shown = conditions(job).get(c.CONDITION_DISPATCHED, {})
            return job if shown.get("reason") == c.REASON_WAITING_FOR_KUEUE else None
        job = await eventually(told, timeout=20, interval=0.2)
        assert c.ANNOTATION_CLUSTER not in (job["metadata"].get("annotations") or {})
        assert c.FINALIZER not in (job["metadata"].get("finalizers") or [])
    assert await Resource(admission_plane.worker, TRAINJOBS).get("forged", namespace=ns) is None
    records = await Resource(admission_plane.manager, PLACEMENTS).list(namespace=f"{ns}-system")
    assert records["items"] == []
