"""How the manager and worker writers turn the API server's answers into outcomes.

A fake client at the edge answers each request as a real API server may (201, 404, 409,
410, 422, 5xx, a timeout); what is checked is what the writer makes of it: the object
written (and remembered), a refusal with a reason a person reads, a `Conflict` to decide
again, nothing left to do, or the error raised for the work queue's backoff.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.fakeclock import FakeClock
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS, PlacementRecord, placement_body
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.controllers.jobs.manager_side import (
    Conflict,
    ManagerWriter,
    RecordNamespaceMissing,
)
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.jobs.worker_side import Refused, WorkerWriter
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.resource import NAMESPACES
from dispatcher.observability.metrics import Metrics
from tests.unit.fakes import FakeClient, cache, worker

KIND = TrainJobKind()
SYSTEM = "trainjob-dispatcher"
DEMAND = {"cpu": Fraction(2)}


def api_error(status: int, message: str = "") -> ApiException:
    error = ApiException(status=status, reason=message or str(status))
    error.body = f'{{"message": "{message}"}}' if message else None
    return error


def job() -> dict[str, Any]:
    body = trainjob("j", "ns", managed_by=MANAGED_BY_MULTIKUEUE)
    body["metadata"].update(uid="uid-1", resourceVersion="7")
    return body


# ----- the worker writer -----


class WorkerRig:
    def __init__(self, *, create_namespaces: bool = True) -> None:
        self.client = FakeClient("w")
        self.metrics = Metrics()
        self.worker = worker("w", FakeClock())
        self.worker.client = self.client.as_client()
        self.worker.mirrors = cache(TRAINJOBS)
        self.writer = WorkerWriter(kind=KIND, origin="o", create_namespaces=create_namespaces,
                                   metrics=self.metrics)

    async def create(self) -> Any:
        return await self.writer.create_mirror(job(), self.worker, DEMAND)

    def creates(self, kind_path: str) -> int:
        return sum(1 for r in self.client.made("create") if r.path == kind_path)


MIRRORS_PATH = TRAINJOBS.path(namespace="ns")
NAMESPACES_PATH = NAMESPACES.path()


async def test_a_created_mirror_is_remembered_and_carries_the_booked_demand() -> None:
    rig = WorkerRig()
    mirror, created = await rig.create()
    assert created and mirror["metadata"]["annotations"][c.ANNOTATION_DEMAND] == "cpu=2"
    assert mirror["metadata"]["labels"][c.LABEL_ORIGIN] == "o"
    assert rig.worker.mirrors is not None and rig.worker.mirrors.get("ns/j") is not None
    assert rig.creates(NAMESPACES_PATH) == 1
    await rig.create()
    assert rig.creates(NAMESPACES_PATH) == 1  # the namespace is known to exist now


@pytest.mark.parametrize("status", [400, 403, 404, 422])
async def test_a_refusal_is_a_rejection_with_the_workers_words(status: int) -> None:
    rig = WorkerRig(create_namespaces=False)
    rig.client.script["create"] = [api_error(status, "denied by policy")]
    outcome = await rig.create()
    assert isinstance(outcome, Refused) and outcome.reason == c.REASON_MIRROR_REJECTED
    assert "w rejected the mirror" in outcome.message and "denied by policy" in outcome.message


async def test_a_409_is_ours_only_with_our_origin_and_the_managers_uid() -> None:
    rig = WorkerRig()
    ours = KIND.build_mirror(job(), origin="o", local_queue="")
    ours["metadata"]["uid"] = "m-1"
    path = TRAINJOBS.path(namespace="ns", name="j")
    rig.client.objects[path] = ours
    rig.client.script["create"] = [{}, api_error(409)]  # the namespace, then the mirror
    mirror, created = await rig.create()
    assert not created and mirror["metadata"]["uid"] == "m-1"
    squatter = trainjob("j", "ns")
    squatter["metadata"]["uid"] = "other"
    rig.client.objects[path] = squatter
    rig.client.script["create"] = [api_error(409)]
    outcome = await rig.create()
    assert isinstance(outcome, Refused) and outcome.reason == c.REASON_NAME_CONFLICT


@pytest.mark.parametrize("error", [api_error(500, "etcd timeout"), api_error(503),
                                   TimeoutError()])
async def test_a_server_error_or_timeout_is_raised_for_the_backoff(
        error: BaseException) -> None:
    rig = WorkerRig(create_namespaces=False)
    rig.client.script["create"] = [error]
    with pytest.raises(type(error)):
        await rig.create()
    assert rig.worker.mirrors is not None and rig.worker.mirrors.get("ns/j") is None


async def test_a_namespace_deleted_on_the_worker_is_made_again() -> None:
    """The cache of namespaces made is not trusted past a 404: the namespace was deleted
    on the worker since; it is made again and the mirror created."""
    rig = WorkerRig()
    await rig.create()
    assert rig.creates(NAMESPACES_PATH) == 1
    rig.client.script["create"] = [api_error(404, 'namespaces "ns" not found')]
    _, created = await rig.create()
    assert created and rig.creates(NAMESPACES_PATH) == 2 and rig.creates(MIRRORS_PATH) == 3
    # Twice in a row: a rejection with the worker's words, not a loop.
    rig.client.script["create"] = [api_error(404, 'namespaces "ns" not found'), {},
                                   api_error(404, 'namespaces "ns" not found')]
    outcome = await rig.create()
    assert isinstance(outcome, Refused) and "not found" in outcome.message


async def test_a_delete_is_of_our_uid_only_and_a_409_means_it_went() -> None:
    rig = WorkerRig()
    mirror = KIND.build_mirror(job(), origin="o", local_queue="")
    mirror["metadata"]["uid"] = "m-1"
    rig.client.objects[TRAINJOBS.path(namespace="ns", name="j")] = mirror
    assert await rig.writer.delete_mirror(rig.worker, mirror)
    [delete] = rig.client.made("delete")
    assert delete.body["preconditions"] == {"uid": "m-1"}
    rig.client.script["delete"] = [api_error(409)]  # the name holds another object now
    assert not await rig.writer.delete_mirror(rig.worker, mirror)
    rig.client.script["delete"] = [api_error(500)]
    with pytest.raises(ApiException):
        await rig.writer.delete_mirror(rig.worker, mirror)


# ----- the manager writer -----


class ManagerRig:
    def __init__(self) -> None:
        self.client = FakeClient("manager")
        self.trainjobs = cache(TRAINJOBS, client=self.client)
        self.records = PlacementRecords(cache(PLACEMENTS, namespace=SYSTEM,
                                              client=self.client))
        self.writer = ManagerWriter(kind=KIND, trainjobs=self.trainjobs, records=self.records,
                                    metrics=Metrics(), clock=FakeClock())


RECORD = PlacementRecord(uid="uid-1", key="ns/j", worker="w", demand=DEMAND)


async def test_the_job_view_write_maps_404_to_gone_and_409_to_conflict() -> None:
    rig = ManagerRig()
    patched = {**job(), "metadata": {**job()["metadata"], "resourceVersion": "8"}}
    rig.client.script["patch"] = [patched, api_error(404), api_error(409), api_error(500)]
    written = await rig.writer.write_view(job(), RECORD)
    assert written is not None and rig.trainjobs.get("ns/j") == patched  # remembered
    [patch] = rig.client.made("patch")
    assert patch.body["metadata"]["resourceVersion"] == "7"  # as decided on
    assert c.FINALIZER in patch.body["metadata"]["finalizers"]
    assert await rig.writer.write_view(job(), RECORD) is None
    with pytest.raises(Conflict):
        await rig.writer.write_view(job(), RECORD)
    with pytest.raises(ApiException):
        await rig.writer.write_view(job(), RECORD)


async def test_the_record_write_maps_its_answers() -> None:
    rig = ManagerRig()
    body = placement_body(RECORD, namespace=SYSTEM)
    body["metadata"]["resourceVersion"] = "3"
    rig.client.script["create"] = [body, api_error(404), api_error(409)]
    written = await rig.writer.write_record(RECORD, previous=None)
    assert written.worker == "w" and written.resource_version == "3"
    assert rig.records.of_uid("uid-1") == written  # remembered
    with pytest.raises(RecordNamespaceMissing):  # the dispatcher's namespace is missing
        await rig.writer.write_record(RECORD, previous=None)
    with pytest.raises(Conflict):  # someone made it meanwhile
        await rig.writer.write_record(RECORD, previous=None)
    rig.client.script["patch"] = [api_error(404), api_error(409), api_error(503)]
    for expected in (Conflict, Conflict, ApiException):
        with pytest.raises(expected):
            await rig.writer.write_record(RECORD, previous=written)
    [*_, patch] = rig.client.made("patch")
    assert patch.body["metadata"]["resourceVersion"] == "3"


async def test_a_record_delete_carries_its_version_and_409_is_a_conflict() -> None:
    rig = ManagerRig()
    record = PlacementRecord(uid="uid-1", key="ns/j", worker="", resource_version="5")
    rig.client.script["delete"] = [{}, api_error(409)]
    await rig.writer.delete_record(record)
    [delete] = rig.client.made("delete")
    assert delete.body["preconditions"] == {"resourceVersion": "5"}
    with pytest.raises(Conflict):
        await rig.writer.delete_record(record)
