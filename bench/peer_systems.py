"""The systems the peer benchmark compares, and how each one's controllers are started.

The dispatcher runs as its own process (`dispatcher run`, its defaults with client QPS
raised, as in bench/dispatch.py), claiming the `bench` namespace; in the fair mode each
worker entry names the worker's LocalQueue and ClusterQueue. MultiKueue needs no process
of its own beyond the Kueue managers that `bench/peer_env.py` starts.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import yaml

from bench.harness import DISPATCHER_CLIENT, RESULTS, wait_ready
from bench.peer_env import (
    KUEUE_DEFAULTS,
    KUEUE_TUNED,
    NAMESPACE,
    QUEUE,
    QUOTA,
    Environment,
    System,
)
from dispatcher.localcluster.cluster import free_port
from dispatcher.localcluster.kueue import MultiKueueSettings

READY_TIMEOUT_SECONDS = 60.0
INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"

SYSTEMS = {
    "dispatcher-fair": System(name="dispatcher-fair", kind="dispatcher",
                              worker_kueue=KUEUE_TUNED),
    "multikueue-default": System(name="multikueue-default", kind="multikueue",
                                 worker_kueue=KUEUE_DEFAULTS, manager_kueue=KUEUE_DEFAULTS),
    "dispatcher": System(name="dispatcher", kind="dispatcher"),
    "multikueue-tuned": System(name="multikueue-tuned", kind="multikueue",
                               worker_kueue=KUEUE_TUNED, manager_kueue=KUEUE_TUNED),
    "multikueue-tuned-incremental": System(
        name="multikueue-tuned-incremental", kind="multikueue", worker_kueue=KUEUE_TUNED,
        manager_kueue=KUEUE_TUNED, multikueue=MultiKueueSettings(dispatcher_name=INCREMENTAL)),
}
"""In run order: the systems alternate, each on fresh clusters. The fair mode's workers
run Kueue with the same settings as the tuned MultiKueue's workers."""


def dispatcher_config(env: Environment, port: int) -> dict[str, Any]:
    fair = env.system.worker_kueue is not None
    queues = {"localQueue": QUEUE, "clusterQueue": QUEUE} if fair else {}
    return {
        "managerKubeconfig": str(env.plane.clusters["manager"].kubeconfig_path),
        "claim": {"namespaces": [NAMESPACE]}, "mirror": {"origin": "bench"},
        "server": {"host": "127.0.0.1", "port": port},
        "client": DISPATCHER_CLIENT,
        "workers": {"fromCRD": False, "probeIntervalSeconds": 2, "static": [
            {"name": w, "kubeconfig": str(env.plane.clusters[w].kubeconfig_path),
             "quota": QUOTA, **queues} for w in env.workers]},
    }


@asynccontextmanager
async def controllers(env: Environment) -> AsyncIterator[dict[str, int]]:
    """Run the system's own processes; yields their pids by name (Kueue's included)."""
    pids = {f"kueue/{name}": c.kueue.process.pid for name, c in env.plane.clusters.items()
            if c.kueue is not None and c.kueue.process.pid is not None}
    if env.system.kind != "dispatcher":
        yield pids
        return
    port = free_port()
    config_path = env.plane.directory / "peer-dispatcher.yaml"
    config_path.write_text(yaml.safe_dump(dispatcher_config(env, port)))
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / "peer-dispatcher.log").open("wb") as log:
        process = subprocess.Popen(  # noqa: ASYNC220 - started once, then only signalled
            [sys.executable, "-m", "dispatcher", "run", "--config", str(config_path)],
            stdout=log, stderr=log)
        try:
            await wait_ready(port, process, timeout=READY_TIMEOUT_SECONDS)
            yield {**pids, "dispatcher": process.pid}
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
