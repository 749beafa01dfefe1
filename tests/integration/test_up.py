"""`dispatcher up` as a person uses it: start it, read the lines it prints, use kubectl and
the Kubeflow SDK on the manager, try a second one, press Ctrl-C, find nothing left.

The environment is one subprocess for the whole module (its own etcd and API servers,
beside the session's control plane); the tests run in file order and the last one stops
it with SIGINT.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from devkit.localcluster.binaries import ensure_binaries
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
_EXPORT = re.compile(r"^export KUBECONFIG=(\S+)  # (\S+)$")


@dataclass
class Up:
    process: subprocess.Popen[str]
    directory: Path
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("ready:"):
                self.ready.set()

    @property
    def kubeconfigs(self) -> dict[str, str]:
        return {m[2]: m[1] for m in map(_EXPORT.match, self.lines) if m}

    def url(self, what: str) -> str:
        line = next(x for x in self.lines if x.startswith(f"{what}: "))
        return line.split(": ", 1)[1]

    def children(self) -> set[int]:
        """Processes whose parent is the `dispatcher up` process."""
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.process.pid:
                found.add(int(stat.parent.name))
        return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@contextlib.contextmanager
def running_up(directory: Path, *flags: str) -> Iterator[Up]:
    """`dispatcher up` in a subprocess until ready; SIGINT (then a kill) at the end."""
    ensure_binaries()
    process = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "up", "--dir", str(directory), "--port", "0",
         "--jobs-seconds", "1", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    env = Up(process, directory)
    reader = threading.Thread(target=env.read, daemon=True)
    reader.start()
    try:
        assert env.ready.wait(120), "\n".join(env.lines)
        yield env
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(5)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    with running_up(tmp_path_factory.mktemp("up")) as env:
        yield env


def kubectl(up: Up, *args: str, kubeconfig: str = "manager") -> str:
    binary = ensure_binaries() / "kubectl"
    result = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60,
                            env={"KUBECONFIG": up.kubeconfigs[kubeconfig], "PATH": "/usr/bin:/bin",
                                 "HOME": str(up.directory)}, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_it_prints_a_kubeconfig_per_cluster_and_the_urls(up: Up) -> None:
    assert set(up.kubeconfigs) == {"manager", "worker-a", "worker-b"}
    for path in up.kubeconfigs.values():
        assert Path(path).parent == up.directory
        assert yaml.safe_load(Path(path).read_text())["kind"] == "Config"
    with urllib.request.urlopen(up.url("metrics"), timeout=5) as response:
        assert b"dispatcher_leader 1.0" in response.read()
    with urllib.request.urlopen(up.url("status page") + "api/status", timeout=5) as response:
        status = json.load(response)
    assert [w["name"] for w in status["workers"]] == ["worker-a", "worker-b"]
    assert all(w["active"] == "True" for w in status["workers"])
    assert any(line.startswith("export PATH=") and "kubectl" in line for line in up.lines)
    hint = (f"the real Trainer, JobSet and kwok nodes run the jobs: KUBECONFIG="
            f"{up.kubeconfigs['worker-a']} kubectl get jobsets,pods -A -o wide")
    assert hint in up.lines, up.lines


def test_a_second_one_says_which_process_runs(up: Up) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dispatcher", "up", "--dir", str(up.directory), "--port", "0"],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert result.returncode == 2
    assert f"already up in {up.directory} (pid {up.process.pid}" in result.stderr
    assert f"export KUBECONFIG={up.kubeconfigs['manager']}" in result.stdout
    assert up.process.poll() is None


def test_kubectl_gets_applies_and_describes(up: Up) -> None:
    workers = kubectl(up, "get", "workerclusters")
    assert re.search(r"worker-a\s+True\s+Connected", workers), workers
    applied = kubectl(up, "apply", "-f", str(REPO / "config" / "samples"))
    assert "trainjob.trainer.kubeflow.org/mnist-small created" in applied
    deadline = time.monotonic() + 60
    while True:
        listed = kubectl(up, "get", "trainjobs,workerclusters", "-o", "json")
        items = json.loads(listed)["items"]
        done = {i["metadata"]["name"] for i in items if i["kind"] == "TrainJob" and any(
            x["type"] == "Complete" and x["status"] == "True"
            for x in (i.get("status") or {}).get("conditions") or [])}
        if {"mnist-small", "bert-eval"} <= done:
            break
        assert time.monotonic() < deadline, listed
        time.sleep(1)
    assert {i["kind"] for i in items} == {"TrainJob", "WorkerCluster"}
    described = kubectl(up, "describe", "trainjob", "mnist-small")
    assert c.CONDITION_DISPATCHED in described and "Complete" in described
    assert re.search(rf"{c.REASON_PLACED}\s+.*mirror created on worker worker-", described), (
        described)
    assert "logs: dispatcher logs default/mnist-small" in described, described
    mirrors = kubectl(up, "get", "trainjobs", "-A", kubeconfig="worker-a") + kubectl(
        up, "get", "trainjobs", "-A", kubeconfig="worker-b")
    assert "not-claimed" not in mirrors


def test_the_finished_jobs_logs_are_read_as_its_namespace_user(up: Up) -> None:
    """The line `up` prints, run as printed: the finished job's mirror is kept (an hour by
    default), and its pods' logs come back through the dispatcher with the user's token."""
    line = next(x for x in up.lines if x.startswith("logs of a job in default"))
    url = re.search(r"DISPATCHER_LOGS_URL=(\S+)", line)
    kubeconfig = re.search(r"--kubeconfig (\S+)", line)
    assert url and kubeconfig, line
    result = subprocess.run(
        [sys.executable, "-m", "dispatcher", "logs", "default/mnist-small", "--kubeconfig",
         kubeconfig[1]], env={**os.environ, "DISPATCHER_LOGS_URL": url[1]},
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
    assert "kwok played this pod's kubelet" in result.stdout, result.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "dispatcher", "logs", "kube-system/mnist-small",
         "--kubeconfig", kubeconfig[1]], env={**os.environ, "DISPATCHER_LOGS_URL": url[1]},
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert refused.returncode == 2 and "HTTP 403" in refused.stderr, refused.stderr


def test_the_kubeflow_sdk_submits_with_the_opt_in_label_and_follows_to_complete(
    up: Up, caplog: pytest.LogCaptureFixture,
) -> None:
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import CustomTrainerContainer, TrainerClient
    from kubeflow.trainer.options import Labels

    caplog.set_level(logging.WARNING, logger="kubeflow")
    client = TrainerClient(backend_config=KubernetesBackendConfig(
        namespace="default", config_file=up.kubeconfigs["manager"]))
    assert "version info is not available" not in caplog.text
    assert [r.name for r in client.list_runtimes()] == ["torch-distributed"]
    name = client.train(
        runtime="torch-distributed",
        trainer=CustomTrainerContainer(image="example.com/train:1", num_nodes=2,
                                       resources_per_node={"cpu": 2, "memory": "4Gi"}),
        options=[Labels({c.LABEL_DISPATCH: "true"})])
    job = client.wait_for_job_status(name, status={"Complete"}, timeout=60,
                                     polling_interval=1)
    assert job.status == "Complete" and job.num_nodes == 2
    raw = client.backend.custom_api.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "default", "trainjobs", name)
    assert raw["spec"]["managedBy"] == MANAGED_BY_MULTIKUEUE
    assert raw["metadata"]["annotations"][c.ANNOTATION_CLUSTER] in ("worker-a", "worker-b")
    assert client.get_job(name).status == "Complete"
    # What the worker's real Trainer wrote: its JobSet's reason, one replicated job done.
    complete = next(x for x in raw["status"]["conditions"] if x["type"] == "Complete")
    assert (complete["reason"], complete["message"]) == (
        "AllJobsCompleted", "jobset completed successfully")
    assert raw["status"]["jobsStatus"] == [{"name": "node", "active": 0, "ready": 0,
                                            "succeeded": 1, "failed": 0, "suspended": 0}]


def test_sigint_stops_every_process_it_started(up: Up) -> None:
    children = up.children()
    assert len(children) >= 5, children  # etcd, 3 API servers, the controller manager
    up.process.send_signal(signal.SIGINT)
    assert up.process.wait(30) == 0
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if _alive(pid)]
    assert up.lines[-1] == "stopped"
    assert not (up.directory / "up.json").exists()
    assert not os.path.exists(up.directory / "clusters" / "etcd" / "member" / "LOCK")
