"""The garbage collector on a fake clock: every `interval` it deletes the mirrors whose
manager job is gone (confirmed against the manager's API, here a fake client) or no
longer claimed with no record, and keeps those its placement record names and those of
claimed jobs with no record (the job controller adopts them); nothing before the
interval has passed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.fakeclock import FakeClock
from dispatcher.api import constants as c
from dispatcher.api.placement import PLACEMENTS
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.claim import Claim
from dispatcher.config import ClaimConfig, MirrorConfig
from dispatcher.controllers.gc import GarbageCollector
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.observability.metrics import Metrics
from tests.unit.fakes import FakeClient, FakeRegistry, cache, worker

JSON = dict[str, Any]
NAMESPACE = "trainjob-dispatcher"
INTERVAL = 30.0


def _mirror(name: str, uid: str) -> JSON:
    return {"apiVersion": TRAINJOBS.api_version, "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"mirror-{uid}",
                         "labels": {c.LABEL_ORIGIN: "test"},
                         "annotations": {c.ANNOTATION_MANAGER_UID: uid}},
            "spec": {}}


class Setup:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.manager = FakeClient("manager")
        self.remote = FakeClient("w1")
        self.metrics = Metrics()
        gone, placed = _mirror("gone", "uid-gone"), _mirror("placed", "uid-placed")
        for mirror in (gone, placed):
            path = TRAINJOBS.path(namespace="ns", name=mirror["metadata"]["name"])
            self.remote.objects[path] = mirror
        self.worker = worker("w1", self.clock)
        self.worker.client = self.remote.as_client()
        self.worker.mirrors = cache(TRAINJOBS, {"ns/gone": gone, "ns/placed": placed})
        job = {"metadata": {"name": "placed", "namespace": "ns", "uid": "uid-placed"},
               "spec": {}}
        record = {"metadata": {"name": "uid-placed", "namespace": NAMESPACE},
                  "spec": {"job": {"namespace": "ns", "name": "placed", "uid": "uid-placed"},
                           "worker": "w1"}}
        self.trainjobs = cache(TRAINJOBS, {"ns/placed": job})
        self.collector = GarbageCollector(
            manager=self.manager.as_client(), trainjobs=self.trainjobs,
            records=PlacementRecords(cache(PLACEMENTS, {f"{NAMESPACE}/uid-placed": record},
                                           namespace=NAMESPACE)),
            registry=FakeRegistry(self.worker),  # type: ignore[arg-type]
            claim=Claim(ClaimConfig(labelSelector="team=a")), kind=TrainJobKind(),
            mirror_config=MirrorConfig(origin="test", retainFinishedSeconds=0),
            interval=INTERVAL,
            metrics=self.metrics, clock=self.clock,
            on_opened=lambda opened: self.opened.append(opened.name))
        self.opened: list[str] = []

    def collected(self) -> float:
        value = self.metrics.registry.get_sample_value(
            "dispatcher_mirrors_garbage_collected_total", {"worker": "w1"})
        return value or 0.0


@pytest.fixture
def setup() -> Setup:
    return Setup()


async def test_orphans_are_deleted_every_interval_and_not_before(setup: Setup) -> None:
    task = asyncio.create_task(setup.collector.run())
    try:
        await setup.clock.advance(INTERVAL - 0.1)
        assert setup.remote.made("delete") == []
        await setup.clock.advance(0.1)
        [delete] = setup.remote.made("delete")
        assert delete.path == TRAINJOBS.path(namespace="ns", name="gone")
        assert delete.body["preconditions"] == {"uid": "mirror-uid-gone"}
        # Confirmed against the manager (the job and its record) before the delete.
        assert [r.verb for r in setup.manager.requests] == ["get", "get"]
        assert setup.worker.mirrors is not None
        assert list(setup.worker.mirrors.store) == ["ns/placed"]
        assert setup.collected() == 1
        await setup.clock.advance(INTERVAL)
        assert len(setup.remote.made("delete")) == 1
    finally:
        task.cancel()
        await asyncio.wait([task])


async def test_an_inactive_worker_is_left_alone(setup: Setup) -> None:
    setup.worker.active = False
    await setup.collector.collect_all()
    assert setup.remote.requests == [] and setup.manager.requests == []


async def test_a_mirror_of_a_job_no_longer_claimed_and_unrecorded_is_an_orphan(
        setup: Setup) -> None:
    """Nothing adopts a job the dispatcher does not claim: its unrecorded mirror goes; a
    claimed job's unrecorded mirror stays (the job controller adopts it)."""
    assert setup.worker.mirrors is not None
    for name, labels in (("unclaimed", {}), ("legacy", {"team": "a"})):
        mirror = _mirror(name, f"uid-{name}")
        setup.remote.objects[TRAINJOBS.path(namespace="ns", name=name)] = mirror
        setup.worker.mirrors.store[f"ns/{name}"] = mirror
        job = {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                            "labels": labels},
               "spec": {"managedBy": ClaimConfig().managed_by}}
        setup.trainjobs.store[f"ns/{name}"] = job
        setup.manager.objects[TRAINJOBS.path(namespace="ns", name=name)] = job
    await setup.collector.collect_all()
    deleted = {r.path for r in setup.remote.made("delete")}
    assert deleted == {TRAINJOBS.path(namespace="ns", name=n) for n in ("gone", "unclaimed")}
    assert sorted(setup.worker.mirrors.store) == ["ns/legacy", "ns/placed"]


async def test_a_failed_first_collection_is_retried_until_the_worker_opens(
        setup: Setup) -> None:
    """The gate is not one-shot: a worker whose first collection failed is collected
    again after a backoff, and opened by the first run that succeeds."""
    opened = setup.opened
    setup.manager.errors["get"] = ApiException(status=500, reason="etcd leader changed")
    task = asyncio.create_task(setup.collector.collect_until_open(setup.worker))
    await setup.clock.advance(0)
    assert not setup.worker.collected and opened == []
    await setup.clock.advance(1.0)  # the retry, failing again: the next waits 2 s
    assert not setup.worker.collected and len(setup.manager.made("get")) == 2
    del setup.manager.errors["get"]
    await setup.clock.advance(2.0)
    await asyncio.wait_for(task, timeout=1)
    assert setup.worker.collected and opened == ["w1"]
    assert setup.collected() == 1


async def test_a_periodic_collection_opens_a_worker_too(setup: Setup) -> None:
    opened = setup.opened
    assert not setup.worker.collected
    await setup.collector.collect_all()
    assert setup.worker.collected and opened == ["w1"]
    await setup.collector.collect_all()
    assert opened == ["w1"]  # opened once
