"""A real Prometheus server scrapes the dispatcher: placements and quota are visible."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from devkit.factories import trainjob
from devkit.localcluster.access import free_port
from devkit.localcluster.processes import ManagedProcess
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource
from tests.integration.conftest import StartDispatcher, eventually

pytestmark = pytest.mark.integration


class Prometheus:
    def __init__(self, directory: Path, target_port: int) -> None:
        self.port = free_port()
        config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [{
            "job_name": "trainjob-dispatcher",
            "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}]}
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.process = ManagedProcess(name="prometheus", argv=[
            "prometheus", f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}"],
            log_path=directory / "prometheus.log")

    async def query(self, promql: str) -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session, session.get(
            f"http://127.0.0.1:{self.port}/api/v1/query", params={"query": promql}
        ) as response:
            body = await response.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])


@pytest_asyncio.fixture
async def prometheus_for(tmp_path: Path) -> AsyncIterator[list[Prometheus]]:
    started: list[Prometheus] = []
    yield started
    for server in started:
        server.process.stop()


async def test_prometheus_sees_placements_and_worker_quota(
    start_dispatcher: StartDispatcher, admin_clients: dict[str, ClusterClient], namespace: str,
    prometheus_for: list[Prometheus], tmp_path: Path,
) -> None:
    dispatcher = await start_dispatcher()
    assert dispatcher.server is not None
    server = Prometheus(tmp_path, dispatcher.server.port)
    prometheus_for.append(server)
    try:
        server.process.start()
    except FileNotFoundError:
        pytest.fail("prometheus is not installed: `make system-deps` installs Debian's package")
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    for i in range(3):
        await jobs.create(trainjob(f"scraped-{i}", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                          namespace=namespace)

    async def placements() -> float:
        try:
            result = await server.query("sum(dispatcher_placements_total)")
        except aiohttp.ClientError:
            return 0.0
        return float(result[0]["value"][1]) if result else 0.0
    assert await eventually(lambda: _at_least(placements, 3), timeout=30, interval=0.5)

    quota = await server.query('dispatcher_worker_quota{worker="worker-a",resource="cpu"}')
    assert float(quota[0]["value"][1]) == 64
    up = await server.query('up{job="trainjob-dispatcher"}')
    assert float(up[0]["value"][1]) == 1


async def _at_least(measure: Any, wanted: float) -> bool:
    return bool(await measure() >= wanted)
