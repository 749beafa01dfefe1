"""The status page in a real browser: headless Chromium (Debian's) loads it from a running
dispatcher with jobs placed, running, waiting and held, and the test reads what it drew.
The same queue comes out of `/api/status` and `dispatcher jobs`; the page can be off."""

from __future__ import annotations

import asyncio
import html
import re
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource
from tests.integration.conftest import StartDispatcher, eventually
from tests.integration.test_admin_cli import cli

pytestmark = pytest.mark.integration
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
QUOTA = {"cpu": "4", "memory": "16Gi"}


async def chromium(url: str, profile: Path, *extra: str) -> str:
    """Load `url`, let its script run for a few (virtual) seconds, return stdout."""
    binary = shutil.which("chromium")
    assert binary, "chromium missing: `make system-deps` installs Debian's chromium"
    process = await asyncio.create_subprocess_exec(
        binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=4000",
        *extra, url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0
    return out.decode()


def rows(dom: str, table: str) -> list[list[str]]:
    body = re.search(rf'<table id="{table}">.*?<tbody>(.*?)</tbody>', dom, re.S)
    assert body, dom
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in
             re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body.group(1), re.S)]


NO_NODE = {"manager": "example.com/tests", "trainingRuntimeSpec": {"template": {"spec": {
    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
        "nodeSelector": {"example.com/pool": "none"}}}}}}]}}}}
"""A runtime patch whose pods no worker node can hold: placed, never running."""


def job(name: str, namespace: str, cpu: str) -> dict[str, Any]:
    return trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                    resources_per_node={"requests": {"cpu": cpu, "memory": "1Gi"}},
                    runtime_patches=[NO_NODE] if name == "big-2" else None)


async def test_chromium_renders_workers_bars_the_queue_and_running_jobs(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str, tmp_path: Path,
) -> None:
    static = [{"name": name, "kubeconfig": str(control_plane.clusters[name].kubeconfig_path),
               "quota": QUOTA} for name in ("worker-a", "worker-b")]
    dispatcher = await start_dispatcher(workers={"static": static})
    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    for name, cpu in (("big-1", "4"), ("big-2", "4"), ("next-1", "4"), ("next-2", "2"),
                      ("huge", "8")):
        await jobs.create(job(name, namespace, cpu), namespace=namespace)
        await asyncio.sleep(1.05)  # creation times a second apart: the queue order is theirs

    seen: list[Any] = []

    async def queued() -> Any:
        view = dispatcher.status_view()
        seen[:] = [view]
        names = [r.name for r in view.queue.items]
        return view if names == ["next-1", "next-2"] and view.placed.total == 2 else None
    try:
        view = await eventually(queued, timeout=20)
    except AssertionError:
        raise AssertionError(f"last view: {seen}") from None
    running = next(r for r in view.placed.items if r.name == "big-1")
    # big-1's pod runs on a kwok node of its worker; big-2's waits for a node that
    # does not exist, so it is placed but not running.
    await eventually(lambda: _state_is(dispatcher, "big-1", "Running"), timeout=30)

    assert dispatcher.status_server is not None
    url = f"http://127.0.0.1:{dispatcher.status_server.port}/"
    dom = await chromium(url, tmp_path / "profile", "--dump-dom")
    assert 'data-loaded="true"' in dom
    assert rows(dom, "queue")[:2] == [
        ["1", namespace, "next-1", c.REASON_WAITING_FOR_QUOTA, rows(dom, "queue")[0][4]],
        ["2", namespace, "next-2", c.REASON_WAITING_FOR_QUOTA, rows(dom, "queue")[1][4]]]
    assert "no worker has 4 cpu free" in rows(dom, "queue")[0][4]
    placed = {r[1]: r for r in rows(dom, "placed")}
    assert placed["big-1"][2:4] == [running.worker, "Running"]
    assert placed["big-2"][3] == "Placed"
    assert dispatcher.logs_server is not None  # each placed job links to its logs
    assert placed["big-1"][5] == "logs" and (
        f'href="http://127.0.0.1:{dispatcher.logs_server.port}/logs/{namespace}/big-1"' in dom)
    assert [r[1:3] for r in rows(dom, "others")] == [["huge", c.REASON_UNSCHEDULABLE]]
    assert any(r[1] == c.REASON_PLACED and r[2] == f"{namespace}/big-1"
               for r in rows(dom, "recent"))
    for worker in ("worker-a", "worker-b"):
        card = re.search(rf'data-worker="{worker}">(.*?)</div></div>', dom, re.S)
        assert card and "active" in card.group(1)
        cpu = re.search(r'data-resource="cpu">.*?<span[^>]*style="width: (\d+)%;?">.*?'
                        r'class="amounts">([^<]*)<', card.group(1), re.S)
        assert cpu and cpu.groups() == ("100", "4 / 4, 0 free"), card.group(1)

    await chromium(url, tmp_path / "profile", "--window-size=1280,1100",
                   f"--screenshot={tmp_path / 'page.png'}")
    assert (tmp_path / "page.png").stat().st_size > 10_000

    async with aiohttp.ClientSession() as session, session.get(
            f"{url}api/status?limit=1") as response:
        body = await response.json()
    assert body["queue"]["total"] == 2 and len(body["queue"]["items"]) == 1
    code, out, err = await cli("jobs", "--kubeconfig",
                               str(control_plane.clusters["manager"].kubeconfig_path),
                               "-n", namespace)
    assert code == 0, err
    queue = [line.split("│")[1:4] for line in out.splitlines() if "next-" in line
             and c.REASON_WAITING_FOR_QUOTA in line]
    assert [[cell.strip() for cell in row] for row in queue] == [
        ["1", namespace, "next-1"], ["2", namespace, "next-2"]]


async def _state_is(dispatcher: Any, name: str, state: str) -> bool:
    return any(r.name == name and r.state == state
               for r in dispatcher.status_view().placed.items)


async def test_the_page_is_on_loopback_apart_from_metrics(
        start_dispatcher: StartDispatcher) -> None:
    """By default the page is bound to 127.0.0.1 on its own port, whatever address
    /metrics has; the metrics address serves no page."""
    dispatcher = await start_dispatcher(server={"host": "0.0.0.0"})
    assert dispatcher.server is not None and dispatcher.status_server is not None
    assert dispatcher.server.bound is not None and dispatcher.server.bound[0] == "0.0.0.0"
    assert dispatcher.status_server.bound == ("127.0.0.1", dispatcher.status_server.port)
    metrics = f"http://127.0.0.1:{dispatcher.server.port}"
    page = f"http://127.0.0.1:{dispatcher.status_server.port}"
    async with aiohttp.ClientSession() as session:
        for url, status in ((f"{metrics}/", 404), (f"{metrics}/api/status", 404),
                            (f"{metrics}/metrics", 200), (f"{metrics}/readyz", 200),
                            (f"{page}/", 200), (f"{page}/api/status", 200),
                            (f"{page}/metrics", 404)):
            async with session.get(url) as response:
                assert response.status == status, url


async def test_the_page_can_be_turned_off(start_dispatcher: StartDispatcher) -> None:
    dispatcher = await start_dispatcher(server={"statusPage": False})
    assert dispatcher.server is not None and dispatcher.status_server is None
    base = f"http://127.0.0.1:{dispatcher.server.port}"
    async with aiohttp.ClientSession() as session:
        for path, status in (("/", 404), ("/api/status", 404), ("/metrics", 200)):
            async with session.get(base + path) as response:
                assert response.status == status, path
        async with session.post(base + "/api/status") as response:
            assert response.status in (404, 405)
