"""Quota-aware placement and the manager-side queue, on real API servers."""

from __future__ import annotations

from typing import Any

import pytest

from devkit.factories import trainjob
from dispatcher.api import constants as c
from dispatcher.api.kueue import WORKLOAD_PRIORITY_CLASSES
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource
from tests.integration.conftest import (
    StartDispatcher,
    complete_mirror,
    eventually,
    looked_at,
    settled,
    trainjobs_refused,
)

pytestmark = pytest.mark.integration
MEMORY = "256Gi"


def static(worker_kubeconfigs: dict[str, str], **cpus: int | str) -> list[dict[str, Any]]:
    return [{"name": name.replace("_", "-"),
             "kubeconfig": worker_kubeconfigs[name.replace("_", "-")],
             "quota": {"cpu": str(cpu), "memory": MEMORY}} for name, cpu in cpus.items()]


async def placement(admin_clients: dict[str, ClusterClient], namespace: str) -> dict[str, str]:
    """Job name -> worker, from the manager's annotations."""
    listed = await Resource(admin_clients["manager"], TRAINJOBS).list(namespace=namespace)
    return {j["metadata"]["name"]: (j["metadata"].get("annotations") or {}).get(
        c.ANNOTATION_CLUSTER, "") for j in listed["items"]}


async def mirror_counts(admin_clients: dict[str, ClusterClient], namespace: str
                        ) -> dict[str, int]:
    counts = {}
    for worker in ("worker-a", "worker-b"):
        listed = await Resource(admin_clients[worker], TRAINJOBS).list(namespace=namespace)
        counts[worker] = len(listed["items"])
    return counts


def dispatched(job: dict[str, Any] | None) -> dict[str, Any]:
    for cond in ((job or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == c.CONDITION_DISPATCHED:
            return dict(cond)
    return {}


async def create_jobs(admin_clients: dict[str, ClusterClient], namespace: str,
                      names: list[str], **kwargs: Any) -> None:
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    for name in names:
        await jobs.create(trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE, **kwargs),
                          namespace=namespace)


async def test_exactly_the_jobs_that_fit_are_placed_and_a_restart_books_nothing_twice(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    config = {"workers": {"static": static(worker_kubeconfigs, worker_a=4, worker_b=6)}}
    first = await start_dispatcher(**config)
    names = [f"job-{i:02d}" for i in range(20)]
    await create_jobs(admin_clients, namespace, names)

    async def ten_placed() -> dict[str, str] | None:
        placed = await placement(admin_clients, namespace)
        return placed if sum(1 for w in placed.values() if w) == 10 else None
    await eventually(ten_placed, timeout=20)
    await settled(first)
    placed = await placement(admin_clients, namespace)
    assert sorted(w for w in placed.values() if w) == ["worker-a"] * 4 + ["worker-b"] * 6
    assert await eventually(lambda: _counts_are(admin_clients, namespace, 4, 6))
    waiting = [n for n, w in placed.items() if not w]
    job = await Resource(admin_clients["manager"], TRAINJOBS).get(waiting[0], namespace=namespace)
    reason = await eventually(lambda: _waiting_reason(admin_clients, namespace, waiting[0]))
    assert reason["reason"] == c.REASON_WAITING_FOR_QUOTA
    assert "no worker has 1 cpu free" in reason["message"]
    assert job is not None

    # A restart in the middle: the new dispatcher rebuilds the ledger and over-books nothing.
    await start_dispatcher.stop(first)
    second = await start_dispatcher(**config)
    listed = await Resource(admin_clients["manager"], TRAINJOBS).list(namespace=namespace)
    # It has looked at every job, placed or waiting, and carried out a pass after that.
    await looked_at(second, [j["metadata"]["uid"] for j in listed["items"]])
    await settled(second)
    assert await mirror_counts(admin_clients, namespace) == {"worker-a": 4, "worker-b": 6}

    # Completing one job on worker-a frees room for exactly one more there.
    done = next(n for n, w in placed.items() if w == "worker-a")
    await complete_mirror(admin_clients, "worker-a", done, namespace)

    async def next_placed() -> bool:
        now = await placement(admin_clients, namespace)
        newly = [n for n, w in now.items() if w == "worker-a" and n != done and not placed[n]]
        return len(newly) == 1
    await eventually(next_placed, timeout=30)  # 10 s ran out once under the full suite
    await settled(second)
    assert await mirror_counts(admin_clients, namespace) == {"worker-a": 4, "worker-b": 6}


async def test_a_finished_jobs_quota_goes_to_the_next_job_before_its_mirror_is_deleted(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    """A finished mirror runs nothing: its quota is free once the manager records the
    end, even while the worker will not let the mirror be deleted; the mirror and the
    finalizer go once it does."""
    config = {"workers": {"static": static(worker_kubeconfigs, worker_a=1)}}
    dispatcher = await start_dispatcher(**config)
    manager = Resource(admin_clients["manager"], TRAINJOBS)
    worker = Resource(admin_clients["worker-a"], TRAINJOBS)
    await create_jobs(admin_clients, namespace, ["first"])
    await eventually(lambda: _counts_are(admin_clients, namespace, 1, 0))
    await create_jobs(admin_clients, namespace, ["second"])
    reason = await eventually(lambda: _waiting_reason(admin_clients, namespace, "second"))
    assert reason["reason"] == c.REASON_WAITING_FOR_QUOTA
    async with trainjobs_refused(admin_clients["worker-a"], namespace, "DELETE",
                                 "mirrors stay here for now"):
        await complete_mirror(admin_clients, "worker-a", "first", namespace)

        async def second_placed() -> bool:
            return (await placement(admin_clients, namespace))["second"] == "worker-a"
        await eventually(second_placed, timeout=15)
        first = await manager.get("first", namespace=namespace)
        assert first is not None and c.FINALIZER in first["metadata"]["finalizers"]
        assert any(x["type"] == "Complete" and x["status"] == "True"
                   for x in first["status"]["conditions"])
        assert await worker.get("first", namespace=namespace) is not None
        # A restart now books the second job and not the finished first one.
        await start_dispatcher.stop(dispatcher)
        dispatcher = await start_dispatcher(**config)
        assert dispatcher.ledger.used("worker-a")["cpu"] == 1
        assert first["metadata"]["uid"] not in dispatcher.ledger

    async def first_left() -> bool:
        job = await manager.get("first", namespace=namespace)
        return (job is not None and not job["metadata"].get("finalizers")
                and await worker.get("first", namespace=namespace) is None)
    await eventually(first_left, timeout=30)
    assert (await placement(admin_clients, namespace))["second"] == "worker-a"


async def _counts_are(admin_clients: dict[str, ClusterClient], namespace: str, a: int,
                      b: int) -> bool:
    return await mirror_counts(admin_clients, namespace) == {"worker-a": a, "worker-b": b}


async def _waiting_reason(admin_clients: dict[str, ClusterClient], namespace: str,
                          name: str) -> dict[str, Any]:
    job = await Resource(admin_clients["manager"], TRAINJOBS).get(name, namespace=namespace)
    cond = dispatched(job)
    return cond if cond.get("status") == "False" else {}


async def test_unschedulable_job_says_so_at_once(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    await start_dispatcher(workers={"static": static(worker_kubeconfigs, worker_a=4, worker_b=8)})
    await create_jobs(admin_clients, namespace, ["huge"], num_nodes=2,
                      resources_per_node={"requests": {"cpu": "10"}})
    reason = await eventually(lambda: _waiting_reason(admin_clients, namespace, "huge"))
    assert reason["reason"] == c.REASON_UNSCHEDULABLE
    assert reason["message"] == "needs 20 cpu; the largest worker, worker-b, has 8 in total"
    assert await mirror_counts(admin_clients, namespace) == {"worker-a": 0, "worker-b": 0}


async def test_priority_order_and_strict_versus_best_effort(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    classes = Resource(admin_clients["manager"], WORKLOAD_PRIORITY_CLASSES)
    high = f"high-{namespace}"
    await classes.create({"apiVersion": WORKLOAD_PRIORITY_CLASSES.api_version,
                          "kind": "WorkloadPriorityClass", "metadata": {"name": high},
                          "value": 1000})
    await start_dispatcher(workers={"static": static(worker_kubeconfigs, worker_a=4)})
    await create_jobs(admin_clients, namespace, ["blocker"], num_nodes=3)
    await eventually(lambda: _counts_are(admin_clients, namespace, 1, 0))
    # Two nodes needed: waits. Then a one-node job passes it (BestEffortFIFO).
    await create_jobs(admin_clients, namespace, ["low-old"], num_nodes=2)
    await eventually(lambda: _waiting_reason(admin_clients, namespace, "low-old"))
    await create_jobs(admin_clients, namespace, ["small"])
    await eventually(lambda: _counts_are(admin_clients, namespace, 2, 0))
    # A newer high-priority job goes before the older low one once room frees up.
    await create_jobs(admin_clients, namespace, ["high-new"], num_nodes=2,
                      labels={c.LABEL_PRIORITY_CLASS: high})
    await eventually(lambda: _waiting_reason(admin_clients, namespace, "high-new"))
    await complete_mirror(admin_clients, "worker-a", "blocker", namespace)

    async def high_placed() -> dict[str, str] | None:
        placed = await placement(admin_clients, namespace)
        return placed if placed["high-new"] == "worker-a" else None
    placed = await eventually(high_placed, timeout=10)
    assert placed["low-old"] == ""


async def test_strict_fifo_holds_smaller_jobs_behind_the_first_waiting(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    await start_dispatcher(placement={"queueingStrategy": "StrictFIFO"},
                           workers={"static": static(worker_kubeconfigs, worker_a=4)})
    await create_jobs(admin_clients, namespace, ["blocker"], num_nodes=3)
    await eventually(lambda: _counts_are(admin_clients, namespace, 1, 0))
    await create_jobs(admin_clients, namespace, ["big"], num_nodes=2)
    await eventually(lambda: _waiting_reason(admin_clients, namespace, "big"))
    await create_jobs(admin_clients, namespace, ["small"])
    reason = await eventually(lambda: _waiting_reason(admin_clients, namespace, "small"))
    assert "behind" in reason["message"] and "big" in reason["message"]
    assert await mirror_counts(admin_clients, namespace) == {"worker-a": 1, "worker-b": 0}
