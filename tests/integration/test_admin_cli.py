"""The admin CLI against the real manager: register, list, cordon, drain, rotate, jobs."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.factories import trainjob
from devkit.localcluster import LocalControlPlane
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.api.workercluster import WORKER_CLUSTERS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource
from tests.integration.conftest import StartDispatcher, eventually

pytestmark = pytest.mark.integration


async def cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatcher", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_register_list_drain_and_rotate_through_the_cli(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str, tmp_path: Path,
) -> None:
    manager_kc = str(control_plane.clusters["manager"].kubeconfig_path)
    system = f"{namespace}-system"
    a, b = f"{namespace}-a", f"{namespace}-b"
    workers = Resource(admin_clients["manager"], WORKER_CLUSTERS)
    try:
        for name, cluster in ((a, "worker-a"), (b, "worker-b")):
            code, out, err = await cli(
                "cluster", "add", name, "--kubeconfig", manager_kc, "--namespace", system,
                "--worker-kubeconfig", str(control_plane.clusters[cluster].kubeconfig_path),
                "--quota", "cpu=8,memory=64Gi", "--label", f"site={cluster}")
            assert code == 0, err
            assert f"worker {name} registered" in out
        registered = await workers.get(a)
        assert registered is not None
        assert registered["spec"]["quota"] == {"cpu": "8", "memory": "64Gi"}
        assert registered["metadata"]["labels"] == {"site": "worker-a"}

        await start_dispatcher(wait_for_workers=False, workers={"fromCRD": True, "static": []})

        async def listed_active() -> str | None:
            code, out, _ = await cli("cluster", "list", "--kubeconfig", manager_kc)
            rows = [line for line in out.splitlines() if namespace in line]
            return out if code == 0 and len(rows) == 2 and all("True" in r for r in rows) else None
        out = await eventually(listed_active, timeout=20, interval=0.5)
        assert "cpu=8" in out

        jobs = Resource(admin_clients["manager"], TRAINJOBS)
        await jobs.create(trainjob("movable", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                   annotations={c.ANNOTATION_CLUSTER_SELECTOR: "site"}),
                          namespace=namespace)

        async def placed() -> str | None:
            job = await jobs.get("movable", namespace=namespace)
            return ((job or {})["metadata"].get("annotations") or {}).get(c.ANNOTATION_CLUSTER)
        first = await eventually(placed, timeout=15)
        other = b if first == a else a
        code, out, err = await cli("cluster", "drain", first, "--kubeconfig", manager_kc)
        assert code == 0, err

        async def moved() -> bool:
            return await placed() == other
        await eventually(moved, timeout=15)
        job = await jobs.get("movable", namespace=namespace)
        assert job is not None
        assert c.ANNOTATION_EVICTIONS not in (job["metadata"].get("annotations") or {})

        code, out, _ = await cli("jobs", "--kubeconfig", manager_kc, "-n", namespace,
                                 "--namespace", system)
        rows = [[cell.strip() for cell in line.split("│")[1:4]] for line in out.splitlines()]
        placed_rows = [row for row in rows if row[1:2] == ["movable"]]
        assert code == 0 and placed_rows == [[namespace, "movable", other]], out

        code, _, err = await cli("cluster", "rotate-credentials", other, "--kubeconfig",
                                 manager_kc, "--namespace", system, "--worker-kubeconfig",
                                 str(tmp_path / "missing.yaml"))
        assert code == 2
        assert err.strip().startswith("dispatcher: cannot read") and len(err.splitlines()) == 1
        insecure: dict[str, Any] = yaml.safe_load(
            control_plane.clusters["worker-b"].kubeconfig_path.read_text())
        insecure["users"][0]["user"] = {"exec": {"command": "get-token",
                                                 "apiVersion": "client.authentication.k8s.io/v1"}}
        (tmp_path / "exec.yaml").write_text(yaml.safe_dump(insecure))
        code, _, err = await cli("cluster", "add", "sneaky", "--kubeconfig", manager_kc,
                                 "--worker-kubeconfig", str(tmp_path / "exec.yaml"))
        assert code == 2 and "exec plugin" in err
        assert await workers.get("sneaky") is None
    finally:
        for name in (a, b):
            await workers.delete(name)
