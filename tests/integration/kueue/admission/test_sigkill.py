"""A dispatcher process SIGKILLed while it serves Kueue's checks, then started again.

The dispatcher runs as `dispatcher run` in a process of its own, with both workers. It
is killed as soon as the first check goes Ready, with the rest of the first jobs in
flight; more jobs are submitted while no dispatcher runs, so Kueue reserves their quota
and their checks wait Pending. The next process (after the dead one's Lease expires)
takes every job up from what the clusters hold: each job ends with one record, one
mirror ever created (never two live at once), its check Ready and never sent to Retry.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.localcluster.access import free_port
from devkit.localcluster.kueue_objects import ADMISSION_CHECKS, wait_active
from dispatcher.admin import ensure_namespace
from dispatcher.api.placement import PLACEMENTS
from dispatcher.kube.resource import EVENTS, LEASES, Resource
from tests.integration.conftest import FAST_LEADER_ELECTION, base_config, deep_merge, eventually
from tests.integration.kueue.admission.conftest import (
    MANAGER,
    Plane,
    both,
    controller_of,
    our_check,
    queues,
    submit,
    watch_mirrors,
    workloads,
)
from tests.integration.kueue.helpers import long_running

pytestmark = pytest.mark.integration
JOB = {"requests": {"cpu": "500m", "memory": "256Mi"}}
LONG = long_running(600)


async def check_states(plane: Plane, ns: str) -> dict[str, str]:
    """Our check's state on each job's Workload, by job name."""
    return {job: str(our_check(wl, ns).get("state", ""))
            for job, wl in (await workloads(plane, ns)).items()}


async def lease_holder(plane: Plane, ns: str) -> str:
    lease = await Resource(plane.manager, LEASES).get("trainjob-dispatcher",
                                                      namespace=f"{ns}-system")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


@pytest.fixture
def dispatcher_process(admission_plane: Plane, ns: str, tmp_path: Path
                       ) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Starts `dispatcher run` processes for the test (append a new one with
    `start(processes)`); whatever still runs is killed at the end."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def start(plane: Plane, ns: str, tmp_path: Path,
          processes: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    config: dict[str, Any] = deep_merge(base_config(plane.plane, ns), {
        "admissionCheck": {"controllerName": controller_of(ns)},
        "managerKubeconfig": str(plane.plane.clusters[MANAGER].kubeconfig_path),
        "server": {"port": free_port()},
        # As deployed: the restarted process waits for the killed one's Lease to expire.
        "leaderElection": FAST_LEADER_ELECTION,
    })
    config["workers"]["static"] = both(plane)["static"]
    path = tmp_path / "dispatcher.yaml"
    path.write_text(yaml.safe_dump(config))
    with (tmp_path / "dispatcher.log").open("ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "dispatcher", "run", "--config",
                                    str(path)], stdout=log, stderr=log)
    processes.append(process)
    return process


async def test_a_sigkilled_dispatcher_restarted_with_checks_pending_duplicates_nothing(
        admission_plane: Plane, ns: str, tmp_path: Path,
        dispatcher_process: list[subprocess.Popen[bytes]]) -> None:
    plane = admission_plane
    await queues(plane, ns)
    await ensure_namespace(plane.manager, f"{ns}-system")
    first_jobs = [f"first-{i:02d}" for i in range(12)]
    later_jobs = [f"later-{i:02d}" for i in range(8)]
    async with watch_mirrors(plane, ns) as mirrors:
        process = start(plane, ns, tmp_path, dispatcher_process)
        await wait_active(plane.manager, ADMISSION_CHECKS, [ns])
        for name in first_jobs:
            await submit(plane, ns, name, num_nodes=1, resources_per_node=JOB,
                         runtime_patches=LONG)

        async def some_ready() -> bool:
            return "Ready" in (await check_states(plane, ns)).values()
        await eventually(some_ready, timeout=60, interval=0.1)
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed_at = await check_states(plane, ns)
        killed_holder = await lease_holder(plane, ns)

        for name in later_jobs:
            await submit(plane, ns, name, num_nodes=1, resources_per_node=JOB,
                         runtime_patches=LONG)

        async def later_pending() -> bool:
            states = await check_states(plane, ns)
            return all(states.get(name) == "Pending" for name in later_jobs)
        await eventually(later_pending, timeout=30, interval=0.2)

        start(plane, ns, tmp_path, dispatcher_process)
        names = set(first_jobs + later_jobs)

        async def all_ready() -> bool:
            states = await check_states(plane, ns)
            return set(states) == names and set(states.values()) == {"Ready"}
        await eventually(all_ready, timeout=120, interval=0.3)

    ready_at_kill = {job for job, state in killed_at.items() if state == "Ready"}
    assert set(first_jobs) - ready_at_kill, f"nothing was in flight at the kill: {killed_at}"
    assert killed_holder and await lease_holder(plane, ns) != killed_holder
    assert {name: len(uids) for name, uids in mirrors.uids.items()} == dict.fromkeys(names, 1)
    assert not mirrors.doubled
    records = await Resource(plane.manager, PLACEMENTS).list(namespace=f"{ns}-system")
    recorded = sorted(r["spec"]["job"]["name"] for r in records["items"])
    assert recorded == sorted(names)
    for job, workload in (await workloads(plane, ns)).items():
        assert not our_check(workload, ns).get("retryCount"), (job, workload["status"])
    events = await Resource(plane.manager, EVENTS).list(namespace=ns)
    assert not [e for e in events["items"] if e.get("reason") == "EvictedDueToAdmissionCheck"]
