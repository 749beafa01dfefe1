"""A job's priority: only a WorkloadPriorityClass through the label, a PriorityClass only
through its pods and where its namespace may use it; the classes listed, never cached by
a name a user wrote."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from devkit.factories import trainjob
from devkit.fakeclock import FakeClock
from dispatcher.api import constants as c
from dispatcher.api.kueue import PRIORITY_CLASSES, WORKLOAD_PRIORITY_CLASSES
from dispatcher.controllers.jobs.priority import CACHE_SECONDS, PriorityCache, priority_of
from dispatcher.kinds.trainjob import TrainJobKind
from tests.unit.fakes import FakeClient

WORKLOAD = {"urgent": 1000}
PODS = {"system-cluster-critical": 2_000_000_000, "batch-high": 500}


@pytest.mark.parametrize(("label", "pods_class", "namespace", "value", "why"), [
    ("", "", "team", 0, ""),
    ("urgent", "batch-high", "team", 1000, "WorkloadPriorityClass 'urgent'"),
    ("system-cluster-critical", "", "team", 0, "which is no WorkloadPriorityClass"),
    ("missing", "batch-high", "team", 0, "which is no WorkloadPriorityClass"),
    ("", "batch-high", "team", 500, "its pods' PriorityClass 'batch-high'"),
    ("", "system-cluster-critical", "team", 0, "is for kube-system only"),
    ("", "system-cluster-critical", "kube-system", 2_000_000_000, "PriorityClass"),
    ("", "nonexistent", "team", 0, "does not exist"),
])
def test_priority_sources(label: str, pods_class: str, namespace: str, value: int,
                          why: str) -> None:
    priority = priority_of(label=label, pods_class=pods_class, namespace=namespace,
                           workload_classes=WORKLOAD, pod_classes=PODS)
    assert priority.value == value
    assert why in priority.why if why else priority.why == ""


def _classes(values: dict[str, int]) -> list[dict[str, Any]]:
    return [{"metadata": {"name": name}, "value": value} for name, value in values.items()]


async def test_the_classes_are_listed_at_most_every_cache_period() -> None:
    client, clock = FakeClient(), FakeClock()
    client.lists[WORKLOAD_PRIORITY_CLASSES.path()] = _classes(WORKLOAD)
    client.lists[PRIORITY_CLASSES.path()] = _classes(PODS)
    cache = PriorityCache(client.as_client(), clock=clock)
    names = [f"made-up-{i}" for i in range(50)] + ["urgent"]
    for name in names:  # a name per job, as users write them: no read per name
        job = trainjob("j", "team", labels={c.LABEL_PRIORITY_CLASS: name})
        await cache.priority(job)
    assert len(client.made("list")) == 2 and not client.made("get")
    assert (await cache.priority(trainjob("j", "team"), pods_class="batch-high")).value == 500
    assert (await cache.priority(trainjob("j", "team"))).value == 0
    assert len(client.made("list")) == 2
    client.lists[WORKLOAD_PRIORITY_CLASSES.path()] = _classes({"urgent": 7})
    await clock.advance(CACHE_SECONDS)
    job = trainjob("j", "team", labels={c.LABEL_PRIORITY_CLASS: "urgent"})
    assert (await cache.priority(job)).value == 7
    assert len(client.made("list")) == 4


async def test_a_manager_without_kueue_has_no_workload_classes() -> None:
    client = FakeClient()
    client.errors["list"] = ApiException(status=404, reason="Not Found")
    cache = PriorityCache(client.as_client(), clock=FakeClock())
    job = trainjob("j", "team", labels={c.LABEL_PRIORITY_CLASS: "urgent"})
    assert (await cache.priority(job)).value == 0


def test_the_pods_class_comes_from_the_runtimes_pod_templates() -> None:
    kind = TrainJobKind()
    runtime = {"kind": "ClusterTrainingRuntime", "metadata": {"name": "r"}, "spec": {
        "template": {"spec": {"replicatedJobs": [
            {"name": "init", "template": {"spec": {"template": {"spec": {
                "containers": [{"name": "i", "image": "x"}]}}}}},
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "priorityClassName": "batch-high",
                "containers": [{"name": "node", "image": "x"}]}}}}}]}}}}
    assert kind.pods_priority_class(kind.parse_runtime(runtime)) == "batch-high"
    runtime["spec"]["template"]["spec"]["replicatedJobs"].pop()
    assert kind.pods_priority_class(kind.parse_runtime(runtime)) == ""
