"""Per-job memory of a long-running dispatcher: thousands of jobs that waited, were
evicted and were deleted leave nothing behind in the controller, the scheduler or the
ledger."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from devkit.factories import trainjob
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource
from tests.integration.conftest import StartDispatcher, eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]  # 2,000 jobs: slow when loaded
JOBS = 2000
QUOTA_CPU = 100


async def test_pending_evicted_and_deleted_jobs_leave_no_memory(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    worker_kubeconfigs: dict[str, str],
) -> None:
    dispatcher = await start_dispatcher(workers={"static": [
        {"name": "worker-a", "kubeconfig": worker_kubeconfigs["worker-a"],
         "quota": {"cpu": str(QUOTA_CPU), "memory": "1Ti"}}]})
    jobs = dispatcher.jobs
    assert jobs is not None
    manager = Resource(admin_clients["manager"], TRAINJOBS)
    mirrors = Resource(admin_clients["worker-a"], TRAINJOBS)
    limit = asyncio.Semaphore(16)

    async def create(index: int) -> None:
        async with limit:
            await manager.create(trainjob(f"job-{index}", namespace,
                                          managed_by=MANAGED_BY_MULTIKUEUE),
                                 namespace=namespace)
    await asyncio.gather(*(create(i) for i in range(JOBS)))

    async def settled() -> int:
        placed = len((await mirrors.list(namespace=namespace))["items"])
        return placed if placed == QUOTA_CPU and len(jobs.scheduling.pending) == JOBS - QUOTA_CPU \
            else 0
    await eventually(settled, timeout=90, interval=0.5)
    assert len(jobs.memories) == JOBS

    # Evict every placed job by deleting its mirror under it: each is requeued.
    for item in (await mirrors.list(namespace=namespace))["items"]:
        await mirrors.delete(item["metadata"]["name"], namespace=namespace)

    async def evicted() -> bool:
        listed = (await manager.list(namespace=namespace))["items"]
        return sum(1 for j in listed if (j["metadata"].get("annotations") or {}).get(
            c.ANNOTATION_EVICTIONS)) >= QUOTA_CPU
    await eventually(evicted, timeout=60, interval=0.5)

    async def delete(index: int) -> None:
        async with limit:
            await manager.delete(f"job-{index}", namespace=namespace)
    await asyncio.gather(*(delete(i) for i in range(JOBS)))

    async def all_gone() -> bool:
        return not (await manager.list(namespace=namespace))["items"]
    await eventually(all_gone, timeout=90, interval=0.5)

    def left() -> dict[str, int]:
        assert jobs is not None
        return {"memories": len(jobs.memories), "pending": len(jobs.scheduling.pending),
                "decisions": len(jobs.scheduling.decisions),
                "reservations": len(jobs.scheduling.reservations),
                "bookings": len(dispatcher.ledger)}

    async def forgotten() -> bool:
        return not any(left().values())
    with contextlib.suppress(AssertionError):
        await eventually(forgotten, timeout=30, interval=0.5)
    assert left() == dict.fromkeys(left(), 0)
    # A mirror created in the moment its job was deleted is collected as an orphan.
    async def no_mirrors() -> bool:
        return not (await mirrors.list(namespace=namespace))["items"]
    await eventually(no_mirrors, timeout=15, interval=0.5)
