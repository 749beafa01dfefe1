"""Two replicas with leader election: one works, the other takes over when it dies."""

from __future__ import annotations

import aiohttp
import pytest

from devkit.factories import trainjob
from dispatcher.admin import ensure_namespace
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.app import Dispatcher
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import LEASES, Resource
from tests.integration.conftest import FAST_LEADER_ELECTION, StartDispatcher, eventually

pytestmark = pytest.mark.integration


async def readyz(dispatcher: Dispatcher) -> str:
    assert dispatcher.server is not None
    async with aiohttp.ClientSession() as session, session.get(
        f"http://127.0.0.1:{dispatcher.server.port}/readyz"
    ) as response:
        return await response.text()


async def mirrors(admin_clients: dict[str, ClusterClient], namespace: str) -> list[str]:
    names = []
    for worker in ("worker-a", "worker-b"):
        listed = await Resource(admin_clients[worker], TRAINJOBS).list(namespace=namespace)
        names += [i["metadata"]["name"] for i in listed["items"]]
    return sorted(names)


async def test_only_the_leader_works_and_a_standby_takes_over(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    await ensure_namespace(admin_clients["manager"], f"{namespace}-system")
    election = {"leaderElection": FAST_LEADER_ELECTION}
    first = await start_dispatcher(**election)
    second = await start_dispatcher(wait_for_workers=False, **election)  # type: ignore[arg-type]
    assert await readyz(first) == "leader"
    assert await readyz(second) == "standby"
    assert second.registry is None, "a standby must not even connect to workers"
    assert await logs_status(second) == 503  # it has no workers to read logs on
    assert await logs_status(first) == 401  # the leader asks for the caller's token
    lease = await Resource(admin_clients["manager"], LEASES).get(
        "trainjob-dispatcher", namespace=f"{namespace}-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == first.instance

    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    names = [f"ha-{i}" for i in range(10)]
    for name in names[:5]:
        await jobs.create(trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                          namespace=namespace)
    await eventually(lambda: _has(admin_clients, namespace, names[:5]), timeout=15)

    await start_dispatcher.stop(first)
    for name in names[5:]:
        await jobs.create(trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                          namespace=namespace)

    async def second_leads() -> bool:
        return await readyz(second) == "leader"
    await eventually(second_leads, timeout=15, interval=0.2)
    await eventually(lambda: _has(admin_clients, namespace, names), timeout=20)
    assert await mirrors(admin_clients, namespace) == sorted(names)


async def logs_status(dispatcher: Dispatcher) -> int:
    assert dispatcher.logs_server is not None
    async with aiohttp.ClientSession() as session, session.get(
        f"http://127.0.0.1:{dispatcher.logs_server.port}/logs/ns/job"
    ) as response:
        return response.status


async def _has(admin_clients: dict[str, ClusterClient], namespace: str,
               names: list[str]) -> bool:
    return set(names) <= set(await mirrors(admin_clients, namespace))
