"""Workers registered as WorkerCluster objects, and a dispatcher killed mid-burst."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from devkit.factories import trainjob
from devkit.invariants import check_invariants
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.access import free_port
from devkit.localcluster.cluster import create_namespace
from dispatcher.admin import register_worker, secret_name
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.api.workercluster import WORKER_CLUSTERS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import SECRETS, Resource
from tests.integration.conftest import (
    DEFAULT_QUOTA,
    StartDispatcher,
    base_config,
    complete_mirror,
    eventually,
)

pytestmark = pytest.mark.integration


def _active(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == c.CONDITION_ACTIVE:
            return dict(cond)
    return None


async def test_broken_kubeconfig_secret_makes_only_that_worker_inactive(
    start_dispatcher: StartDispatcher, control_plane: LocalControlPlane,
    admin_clients: dict[str, ClusterClient], namespace: str,
) -> None:
    manager = admin_clients["manager"]
    system = f"{namespace}-system"
    names = {"worker-a": f"{namespace}-a", "worker-b": f"{namespace}-b"}
    for cluster, name in names.items():
        await register_worker(manager, namespace=system, name=name,
                              kubeconfig=control_plane.clusters[cluster].kubeconfig(),
                              quota=DEFAULT_QUOTA)
    workers = Resource(manager, WORKER_CLUSTERS)
    try:
        await start_dispatcher(wait_for_workers=False, workers={"fromCRD": True, "static": []})

        async def both_active() -> bool:
            objs = [await workers.get(n) for n in names.values()]
            return all((_active(o) or {}).get("status") == "True" for o in objs)
        await eventually(both_active, timeout=20)

        broken = base64.b64encode(b"apiVersion: v1\nclusters: [unterminated").decode()
        await Resource(manager, SECRETS).merge_patch(
            secret_name(names["worker-a"]), {"data": {"kubeconfig": broken}}, namespace=system)

        async def a_bad() -> dict[str, Any] | None:
            cond = _active(await workers.get(names["worker-a"]))
            return cond if cond and cond["reason"] == c.REASON_BAD_KUBECONFIG else None
        cond = await eventually(a_bad, timeout=10)
        assert cond["status"] == "False"
        assert "not valid YAML" in cond["message"]
        assert "unterminated" not in cond["message"]
        b = _active(await workers.get(names["worker-b"]))
        assert b is not None and b["status"] == "True"

        jobs = Resource(manager, TRAINJOBS)
        await jobs.create(trainjob("still-works", namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                          namespace=namespace)
        mirror = Resource(admin_clients["worker-b"], TRAINJOBS)
        await eventually(lambda: mirror.get("still-works", namespace=namespace))

        async def b_status(holds: bool) -> dict[str, Any] | None:
            status = ((await workers.get(names["worker-b"])) or {}).get("status") or {}
            return status if bool(status.get("usedByUs")) == holds else None
        held = await eventually(lambda: b_status(True), timeout=10)
        assert held["usedByUs"]["cpu"] == held["used"]["cpu"] == "1"
        assert held["free"]["cpu"] == "63" and not held.get("usedByOthers")
        # The job ends: its amounts leave the status (a merge patch alone would keep them).
        await complete_mirror(admin_clients, "worker-b", "still-works", namespace)
        released = await eventually(lambda: b_status(False), timeout=10)
        assert not released.get("used") and released["free"]["cpu"] == "64"

        await Resource(manager, SECRETS).delete(secret_name(names["worker-a"]), namespace=system)

        async def a_missing() -> bool:
            cond = _active(await workers.get(names["worker-a"]))
            return bool(cond and cond["reason"] == c.REASON_SECRET_NOT_FOUND)
        await eventually(a_missing, timeout=10)
    finally:
        for name in names.values():
            await workers.delete(name)


async def _placements(admin_clients: dict[str, ClusterClient], namespace: str,
                      names: list[str]) -> dict[str, list[str]]:
    """Job name -> the workers holding a mirror of it."""
    found: dict[str, list[str]] = {n: [] for n in names}
    for worker in ("worker-a", "worker-b"):
        listed = await Resource(admin_clients[worker], TRAINJOBS).list(namespace=namespace)
        for item in listed["items"]:
            found.setdefault(item["metadata"]["name"], []).append(worker)
    return found


async def _passes(port: int) -> float:
    """The scheduling passes a dispatcher process has run, from its /metrics (0 while it
    does not answer yet)."""
    try:
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    except aiohttp.ClientError:
        return 0.0
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("dispatcher_scheduling_passes_total"))


async def test_sigkilled_dispatcher_restarts_without_duplicates_or_losses(
    control_plane: LocalControlPlane, admin_clients: dict[str, ClusterClient], namespace: str,
    runtime_installed: dict[str, Any], tmp_path: Path,
) -> None:
    config = base_config(control_plane, namespace)
    await create_namespace(control_plane.clusters["manager"], config["namespace"])
    quota = {"cpu": "200", "memory": "1000Gi"}
    for worker in config["workers"]["static"]:
        worker["quota"] = quota
    config["managerKubeconfig"] = str(control_plane.clusters["manager"].kubeconfig_path)
    port = config["server"]["port"] = free_port()
    config_path = tmp_path / "dispatcher.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log = (tmp_path / "dispatcher.log").open("ab")

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "dispatcher", "run", "--config",
                                 str(config_path)], stdout=log, stderr=log)

    jobs = Resource(admin_clients["manager"], TRAINJOBS)
    names = [f"burst-{i:03d}" for i in range(200)]
    process = start()
    try:
        for name in names[:100]:
            await jobs.create(trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                              namespace=namespace)

        async def some_placed() -> bool:
            placed = await _placements(admin_clients, namespace, names)
            return sum(1 for w in placed.values() if w) >= 20
        await eventually(some_placed, timeout=30)
        process.send_signal(signal.SIGKILL)
        process.wait()
        for name in names[100:]:
            await jobs.create(trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE),
                              namespace=namespace)
        process = start()

        async def all_placed() -> dict[str, list[str]] | None:
            placed = await _placements(admin_clients, namespace, names)
            return placed if all(placed[n] for n in names) else None
        await eventually(all_placed, timeout=90)
        # Proof the dispatcher looked again after all were placed: a job no worker can
        # hold makes it run a scheduling pass, counted on its /metrics, and say so.
        passes = await _passes(port)
        await jobs.create(trainjob("too-big", namespace, managed_by=MANAGED_BY_MULTIKUEUE,
                                   resources_per_node={"requests": {"cpu": "500"}}),
                          namespace=namespace)

        async def looked_again() -> bool:
            job = await jobs.get("too-big", namespace=namespace) or {}
            reasons = [cond.get("reason") for cond in (job.get("status") or {}).get(
                "conditions") or [] if cond["type"] == c.CONDITION_DISPATCHED]
            return (await _passes(port) > passes
                    and reasons == [c.REASON_UNSCHEDULABLE])
        await eventually(looked_again, timeout=30)
        placed = await _placements(admin_clients, namespace, names)
        assert all(len(workers) == 1 for workers in placed.values()), placed
        for name in names:
            job = await jobs.get(name, namespace=namespace)
            assert job is not None
            assert job["metadata"]["annotations"][c.ANNOTATION_CLUSTER] == placed[name][0]
        problems = await check_invariants(
            admin_clients, namespace, origin=namespace,
            workers={"worker-a": quota, "worker-b": quota})
        assert not problems
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()
