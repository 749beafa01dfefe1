"""Kueue's start and stop on a local cluster: nothing left behind, even after a kill."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devkit.factories import trainjob
from devkit.localcluster.access import admin_client
from devkit.localcluster.kueue import CONVERTED_CRDS
from devkit.localcluster.webhooks import MUTATING, VALIDATING
from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.resource import CRDS, Resource
from tests.integration.conftest import eventually
from tests.integration.kueue.conftest import KueueClusters

pytestmark = pytest.mark.integration

_CHILD = textwrap.dedent("""
    import asyncio, json, pathlib, sys, time
    from devkit.localcluster import LocalControlPlane

    async def main() -> None:
        plane = LocalControlPlane(directory=pathlib.Path(sys.argv[1]))
        await plane.start(["solo"], controllers=["solo"])
        await plane.clusters["solo"].start_kueue()
        print(json.dumps([p.pid for p in plane.processes()]), flush=True)
        time.sleep(600)

    asyncio.run(main())
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0; it is gone once its state says so.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


async def test_stopping_kueue_unhooks_it_and_the_cluster_works_without_it(
    kueue_clusters: KueueClusters,
) -> None:
    plane = kueue_clusters.plane
    if "spare" not in plane.clusters:
        await plane.start(["spare"], controllers=["spare"])
    cluster = plane.clusters["spare"]
    kueue = await cluster.start_kueue()
    pid = kueue.process.pid
    assert pid is not None and _alive(pid)
    await cluster.stop_kueue()
    assert cluster.kueue is None and not _alive(pid)
    client = await admin_client(cluster)
    try:
        for kind in (MUTATING, VALIDATING):
            listed = await Resource(client, kind).list()
            assert not [w for w in listed["items"]
                        if w["metadata"]["name"].startswith("kueue-")], listed["items"]
        for name in CONVERTED_CRDS:
            crd = await Resource(client, CRDS).get(name)
            assert crd is not None and crd["spec"]["conversion"]["strategy"] == "None"
        # No webhook in the way: a TrainJob with a queue name is created as sent.
        created = await Resource(client, TRAINJOBS).create(
            trainjob("after-kueue", "default", labels={"kueue.x-k8s.io/queue-name": "q"}),
            namespace="default")
        assert not created["spec"].get("suspend")
    finally:
        await client.close()


async def test_a_killed_harness_leaves_no_kueue_or_api_server_behind(tmp_path: Path) -> None:
    child = subprocess.Popen(  # noqa: ASYNC220 - one child, read once
        [sys.executable, "-c", _CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline),  # type: ignore[union-attr]
                                      timeout=120)
        pids = json.loads(line)
        assert len(pids) == 4 and all(_alive(p) for p in pids)  # API server, GC, Kueue, etcd
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()

    async def all_gone() -> bool:
        return not any(_alive(p) for p in pids)
    await eventually(all_gone, timeout=10, interval=0.2)
