"""Container logs for the pods kwok runs on a local worker, served through the API server.

kwok plays the kubelet, so a pod's `pods/log` reaches kwok's own server (the worker's
API server asks the node's InternalIP, 127.0.0.1 here, at its kubelet port), which
answers from a file in the CRI log format. No container runs, so those files are the
local environment's stand-in for a training script's output: every pod gets
`DEFAULT_LINES` (kwok's `ClusterLogs`, written at the start), and a test gives one pod
lines of its own with `serve_pod_logs` (a kwok `Logs` object naming the file), then may
`append_lines` to it while someone follows the log.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource, ResourceKind

JSON = dict[str, Any]
KWOK_LOGS = ResourceKind("kwok.x-k8s.io", "v1alpha1", "logs", namespaced=True)
DEFAULT_LINES = [
    "local environment: kwok played this pod's kubelet and ran no container;",
    "on a real worker the training script's output is read here.",
]
_FIELD_MANAGER = "devkit.trainjob-dispatcher.io/pod-logs"


def cri_lines(lines: list[str], *, stream: str = "stdout") -> str:
    """`lines` as a container runtime writes them: time, stream, full-line tag, text."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "".join(f"{now} {stream} F {line}\n" for line in lines)


def append_lines(path: Path, lines: list[str]) -> None:
    with path.open("a") as file:
        file.write(cri_lines(lines))


def default_logs_config(directory: Path) -> Path:
    """kwok's configuration serving `DEFAULT_LINES` for every pod (written in `directory`)."""
    directory.mkdir(parents=True, exist_ok=True)
    default = directory / "default.log"
    default.write_text(cri_lines(DEFAULT_LINES))
    config = directory / "cluster-logs.yaml"
    config.write_text(
        "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterLogs\n"
        "metadata: {name: every-pod}\n"
        f"spec: {{selector: {{}}, logs: [{{logsFile: {str(default)!r}}}]}}\n")
    return config


def write_pod_logs(directory: Path, pod: JSON, lines: dict[str, list[str]]) -> dict[str, Path]:
    """The files of `lines[container]` for each container of `pod`, written in `directory`."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for container, text in lines.items():
        path = directory / f"{namespace}_{name}_{container}.log"
        path.write_text(cri_lines(text))
        files[container] = path
    return files


async def serve_pod_logs(client: ClusterClient, directory: Path, pod: JSON,
                         lines: dict[str, list[str]]) -> dict[str, Path]:
    """Make kwok serve `lines[container]` as the log of each container of `pod`; returns
    the file of each (to append to)."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    files = write_pod_logs(directory, pod, lines)
    await Resource(client, KWOK_LOGS).apply({
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"logs": [{"containers": [container], "logsFile": str(path), "follow": True}
                          for container, path in files.items()]}},
        field_manager=_FIELD_MANAGER)
    return files
