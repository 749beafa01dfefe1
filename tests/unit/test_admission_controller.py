"""The AdmissionCheck controller's I/O over a fake manager client on a fake clock: what it
writes on a Workload's status and on its AdmissionCheck, that a write happens only on a
change (keeping the transition time when the state stays), and how the manager's
answers (409, 404, 5xx) become a retry, nothing, or an error for the work queue. Why a
job waits is the jobs controller's answer (`explain`), never the job's status read back."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.fakeclock import FakeClock
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS, PlacementRecord, placement_body
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.claim import Claim
from dispatcher.config import ClaimConfig
from dispatcher.controllers.admission.controller import (
    CHECK_KEY,
    WORKLOAD_KEY,
    AdmissionCheckController,
)
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.informer import InformerSettings
from dispatcher.kube.workqueue import Result
from tests.unit.fakes import FakeClient, FakeRegistry, cache, worker
from tests.unit.test_admission_check import CHECK, workload
from tests.unit.test_decide import job
from tests.unit.test_writers import api_error

CONTROLLER = "dispatcher.trainjob.io/multicluster"
WORKLOAD = "ns/trainjob-j-1"


class Rig:
    def __init__(self, *, job_obj: dict[str, Any], workers: int = 1,
                 records: tuple[PlacementRecord, ...] = ()) -> None:
        self.clock = FakeClock()
        self.client = FakeClient("manager")
        registry = FakeRegistry(*(worker(f"w{i}", self.clock) for i in range(workers)))
        placements = PlacementRecords(cache(PLACEMENTS, namespace="sys"))
        for record in records:
            placements.remember(placement_body(record, namespace="sys"))
        self.uid = job_obj["metadata"]["uid"]
        self.controller = AdmissionCheckController(
            controller_name=CONTROLLER, manager=self.client.as_client(), kind=TrainJobKind(),
            claim=Claim(ClaimConfig()), origin="o",
            trainjobs=cache(TRAINJOBS, {"ns/j": job_obj}),
            records=placements,
            registry=registry, settings=InformerSettings(),  # type: ignore[arg-type]
            clock=self.clock, on_job=lambda key: None, explain=self.explain)
        self.why: tuple[str, str] | None = None
        self.asked: list[str] = []
        self.controller.workloads.store = {WORKLOAD: self.owned(workload())}
        self.controller.checks.store = {CHECK: {
            "metadata": {"name": CHECK, "resourceVersion": "1", "generation": 2},
            "spec": {"controllerName": CONTROLLER}}}


    def owned(self, wl: dict[str, Any]) -> dict[str, Any]:
        """`wl`, a Workload of the job."""
        wl["metadata"]["ownerReferences"] = [{"controller": True, "name": "j",
                                              "uid": self.uid}]
        return wl

    async def explain(self, key: str) -> tuple[str, str] | None:
        self.asked.append(key)
        return self.why


def unclaimed_job() -> dict[str, Any]:
    obj = job()
    assert "managedBy" not in obj["spec"]
    return obj


async def test_a_workload_of_a_job_not_claimed_gets_our_check_rejected_once() -> None:
    rig = Rig(job_obj=unclaimed_job())
    written = workload(state="Rejected", message="m")
    written["metadata"]["resourceVersion"] = "4"  # as an API server answers a change
    rig.client.script["apply"] = [written]
    assert await rig.controller.reconcile(WORKLOAD_KEY + WORKLOAD) == Result.done()
    [apply] = rig.client.made("apply")
    assert apply.path.endswith("/namespaces/ns/workloads/trainjob-j-1/status")
    assert apply.body["metadata"]["resourceVersion"] == "3"     # as read, or a 409
    [check] = apply.body["status"]["admissionChecks"]
    assert (check["name"], check["state"]) == (CHECK, "Rejected")
    assert "spec.managedBy" in check["message"]
    assert check["lastTransitionTime"] != "2026-01-01T00:00:00Z"  # the state moved: now
    assert rig.controller.workloads.get(WORKLOAD) == written    # remembered
    assert await rig.controller.reconcile(WORKLOAD_KEY + WORKLOAD) == Result.done()
    assert len(rig.client.made("apply")) == 1                   # no change, no write


def claimed_job_showing(message: str) -> dict[str, Any]:
    obj = job()
    obj["spec"]["managedBy"] = MANAGED_BY_MULTIKUEUE
    obj["status"] = {"conditions": [{"type": c.CONDITION_DISPATCHED, "status": "False",
                                     "reason": c.REASON_WAITING_FOR_QUOTA,
                                     "message": message}]}
    return obj


async def test_why_a_job_waits_is_the_jobs_controllers_word_not_its_status() -> None:
    rig = Rig(job_obj=claimed_job_showing("stale words in the job's status"))
    rig.why = (c.REASON_WAITING_FOR_QUOTA, "no worker has cpu 4 free")
    rig.client.script["apply"] = [rig.owned(workload(message="no worker has cpu 4 free"))]
    await rig.controller.reconcile(WORKLOAD_KEY + WORKLOAD)
    [apply] = rig.client.made("apply")
    [check] = apply.body["status"]["admissionChecks"]
    assert (check["state"], check["message"]) == ("Pending", "no worker has cpu 4 free")
    assert rig.asked == ["ns/j"]
    rig.why = (c.REASON_UNSCHEDULABLE, "needs cpu 80, the largest worker has 64")
    rig.client.script["apply"] = [rig.owned(workload(state="Rejected"))]
    await rig.controller.reconcile(WORKLOAD_KEY + WORKLOAD)
    [check] = rig.client.made("apply")[-1].body["status"]["admissionChecks"]
    assert (check["state"], check["message"]) == (
        "Rejected", "no worker can hold it: needs cpu 80, the largest worker has 64")


async def test_a_ready_check_of_a_job_taken_off_retries_with_its_records_why() -> None:
    obj = claimed_job_showing("stale words in the job's status")
    taken_off = PlacementRecord(uid=obj["metadata"]["uid"], key="ns/j", worker="",
                                taken_off=(c.REASON_EVICTED, "evicted on worker w0"))
    rig = Rig(job_obj=obj, records=(taken_off,))
    rig.controller.workloads.store[WORKLOAD] = rig.owned(workload(state="Ready"))
    rig.why = (c.REASON_WAITING_FOR_QUOTA, "no worker has room")
    rig.client.script["apply"] = [workload(state="Retry")]
    await rig.controller.reconcile(WORKLOAD_KEY + WORKLOAD)
    [apply] = rig.client.made("apply")
    [check] = apply.body["status"]["admissionChecks"]
    assert (check["state"], check["message"]) == (
        "Retry", "taken off its worker: evicted on worker w0")


@pytest.mark.parametrize(("error", "outcome"), [
    (api_error(409), Result.retry()), (api_error(404), Result.done())])
async def test_a_conflict_is_retried_and_a_vanished_workload_forgotten(
        error: ApiException, outcome: Result) -> None:
    rig = Rig(job_obj=unclaimed_job())
    rig.client.script["apply"] = [error]
    assert await rig.controller.reconcile(WORKLOAD_KEY + WORKLOAD) == outcome


async def test_a_server_error_goes_back_to_the_queue_as_an_error() -> None:
    rig = Rig(job_obj=unclaimed_job())
    rig.client.script["apply"] = [api_error(503)]
    with pytest.raises(ApiException):
        await rig.controller.reconcile(WORKLOAD_KEY + WORKLOAD)


async def test_the_check_is_marked_active_once_while_workers_are_registered() -> None:
    rig = Rig(job_obj=job(), workers=2)
    patched = {**rig.controller.checks.store[CHECK], "status": {"conditions": []}}
    rig.client.script["patch"] = [patched]
    await rig.controller.reconcile(CHECK_KEY + CHECK)
    [patch] = rig.client.made("patch")
    [active] = patch.body["status"]["conditions"]
    assert active["type"] == c.CONDITION_ACTIVE and active["observedGeneration"] == 2
    assert patch.body["metadata"]["resourceVersion"] == "1"
    rig.client.script["patch"] = [api_error(409)]
    assert await rig.controller.reconcile(CHECK_KEY + CHECK) == Result.retry()


async def test_a_check_of_another_controller_is_never_written() -> None:
    rig = Rig(job_obj=job())
    rig.controller.checks.store[CHECK]["spec"]["controllerName"] = "kueue.x-k8s.io/multikueue"
    await rig.controller.reconcile(CHECK_KEY + CHECK)
    await rig.controller.reconcile(WORKLOAD_KEY + WORKLOAD)
    assert rig.client.requests == []

