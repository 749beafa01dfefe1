"""An informer's index follows its cache: writes remembered, objects forgotten, watch
events and relists (the watch lines fed by hand; the watch itself is tested on real API
servers); a job known by name has its object's key."""

from __future__ import annotations

import json
from typing import Any

from dispatcher.api.kueue import WORKLOADS, WORKLOADS_BY_JOB, job_uid_of
from dispatcher.kube.informer import Informer, job_key, object_key
from dispatcher.kube.resource import Resource
from tests.unit.fakes import FakeClient


def workload(name: str, job_uid: str | None, version: int) -> dict[str, Any]:
    refs = [{"kind": "TrainJob", "name": "j", "uid": job_uid, "controller": True}] \
        if job_uid else []
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(version),
                         "ownerReferences": refs}}


def informer() -> Informer:
    return Informer(Resource(FakeClient().as_client(), WORKLOADS),
                    indexes={WORKLOADS_BY_JOB: job_uid_of})


def names(found: list[dict[str, Any]]) -> list[str]:
    return [obj["metadata"]["name"] for obj in found]


def line(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode()


def test_the_index_follows_remembered_and_forgotten_objects() -> None:
    cache = informer()
    cache.remember(workload("w1", "u1", 1))
    cache.remember(workload("w2", "u2", 2))
    assert names(cache.indexed(WORKLOADS_BY_JOB, "u1")) == ["w1"]
    cache.remember(workload("w1", "u3", 3))  # its owner changed
    assert cache.indexed(WORKLOADS_BY_JOB, "u1") == []
    assert names(cache.indexed(WORKLOADS_BY_JOB, "u3")) == ["w1"]
    cache.remember(workload("w1", "u1", 2))  # older than the cache: ignored
    assert names(cache.indexed(WORKLOADS_BY_JOB, "u3")) == ["w1"]
    cache.forget("ns/w1")
    assert cache.indexed(WORKLOADS_BY_JOB, "u3") == []
    assert names(cache.indexed(WORKLOADS_BY_JOB, "u2")) == ["w2"]
    cache.remember(workload("orphan", None, 4))
    assert set(cache.store) == {"ns/w2", "ns/orphan"}


def test_the_index_follows_watch_events() -> None:
    cache = informer()
    cache._handle_line(line("ADDED", workload("w1", "u1", 1)))
    cache._handle_line(line("ADDED", workload("w2", "u1", 2)))
    assert names(cache.indexed(WORKLOADS_BY_JOB, "u1")) == ["w1", "w2"]
    cache._handle_line(line("MODIFIED", workload("w2", "u2", 3)))
    assert names(cache.indexed(WORKLOADS_BY_JOB, "u1")) == ["w1"]
    cache._handle_line(line("DELETED", workload("w1", "u1", 4)))
    assert cache.indexed(WORKLOADS_BY_JOB, "u1") == []
    assert names(cache.indexed(WORKLOADS_BY_JOB, "u2")) == ["w2"]


def test_a_job_known_by_name_has_the_key_of_its_object() -> None:
    job = {"metadata": {"namespace": "team", "name": "train"}}
    assert job_key("team", "train") == object_key(job) == "team/train"


def test_an_index_counts_its_objects_by_value_as_they_come_change_and_go() -> None:
    cache = informer()
    cache._handle_line(line("ADDED", workload("w1", "u1", 1)))
    cache._handle_line(line("ADDED", workload("w2", "u1", 2)))
    cache._handle_line(line("ADDED", workload("w3", "u2", 3)))
    assert cache.counts(WORKLOADS_BY_JOB) == {"u1": 2, "u2": 1}
    cache._handle_line(line("MODIFIED", workload("w2", "u2", 4)))
    cache._handle_line(line("DELETED", workload("w1", "u1", 5)))
    assert cache.counts(WORKLOADS_BY_JOB) == {"u2": 2}
