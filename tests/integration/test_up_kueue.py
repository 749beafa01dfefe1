"""`dispatcher up --kueue` as a person uses it: workers with their own real Kueue, a job
that waits for that Kueue's admission and runs, a job of a worker's own users seen as
used by others, and Ctrl-C stopping every process, the Kueue managers included."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.localcluster.trainer import kwok_patch
from dispatcher.api import constants as c
from tests.integration.test_up import Up, _alive, kubectl, running_up

pytestmark = pytest.mark.integration
LOCAL_JOB = yaml.safe_load("""
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: local-work
  namespace: default
  labels: {kueue.x-k8s.io/queue-name: default}
spec:
  runtimeRef: {name: torch-distributed, apiGroup: trainer.kubeflow.org,
               kind: ClusterTrainingRuntime}
  trainer: {numNodes: 1, resourcesPerNode: {requests: {cpu: "3"}}}
""")
LOCAL_JOB["spec"]["runtimePatches"] = [kwok_patch()]
"""Its pod runs on a kwok node until the test ends (`up` runs the others' for 1 s), so its
Kueue holds the 3 CPUs for as long as the test looks."""


def _until(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def _status(up: Up) -> dict[str, Any]:
    with urllib.request.urlopen(up.url("status page") + "api/status", timeout=5) as response:
        found: dict[str, Any] = json.load(response)
    return found


def _job(up: Up, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(kubectl(up, "get", "trainjob", name, "-o", "json"))
    return found


def _dispatched(job: dict[str, Any]) -> dict[str, Any]:
    return next((x for x in (job.get("status") or {}).get("conditions") or []
                 if x["type"] == c.CONDITION_DISPATCHED), {})


def test_up_with_kueue_on_the_workers(tmp_path: Path) -> None:
    with running_up(tmp_path / "up", "--kueue") as up:
        assert ("workers run Kueue: ClusterQueue dispatcher, LocalQueue default in "
                "namespace(s) default") in up.lines
        assert all(w["active"] == "True" for w in _status(up)["workers"])
        # Worker A's own users take 3 of its 8 CPUs through its Kueue.
        local = tmp_path / "local.yaml"
        local.write_text(yaml.safe_dump(LOCAL_JOB))
        kubectl(up, "apply", "-f", str(local), kubeconfig="worker-a")

        def others_on_a() -> bool:
            [a] = [w for w in _status(up)["workers"] if w["name"] == "worker-a"]
            return any(r["resource"] == "cpu" and r["used_by_others"] == "3"
                       for r in a["resources"])
        _until(others_on_a)
        kubectl(up, "apply", "-f", str(Path(__file__).parents[2] / "config" / "samples"))

        def complete() -> dict[str, Any] | None:
            job = _job(up, "mnist-small")
            done = any(x["type"] == "Complete" and x["status"] == "True"
                       for x in (job.get("status") or {}).get("conditions") or [])
            return job if done else None
        job = _until(complete)
        assert _dispatched(job)["message"].startswith("Complete on worker worker-")
        assert others_on_a(), "the local job's pod still runs: its Kueue still holds 3 CPUs"
        described = kubectl(up, "describe", "trainjob", "mnist-small")
        assert "mirror created on worker worker-" in described
        children = up.children()
        assert len(children) >= 7, children  # etcd, 3 API servers, 3 controller managers
        kueue = [pid for pid in children if Path(Path(f"/proc/{pid}/cmdline").read_bytes()
                                                 .split(b"\0")[0].decode()).name == "kueue"]
        assert len(kueue) == 2, kueue
        up.process.send_signal(signal.SIGINT)
        assert up.process.wait(30) == 0
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if _alive(pid)]
