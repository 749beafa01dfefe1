"""The systems the peer benchmark compares, and how each one's controllers are started.

The dispatcher runs as its own process (`dispatcher run`, its defaults with client QPS
raised, as in bench/harness.py), claiming the `bench` namespace; in the fair mode each
worker entry names the worker's LocalQueue and ClusterQueue; in the symmetric mode it is
also the AdmissionCheck of the manager's Kueue. MultiKueue needs no process
of its own beyond the Kueue managers that `bench/peer/env.py` starts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from bench.harness import DISPATCHER_CLIENT, RESULTS, wait_ready
from bench.peer.env import (
    CHECK_CONTROLLER,
    KUEUE_DEFAULTS,
    KUEUE_QPS,
    KUEUE_SHIPPED,
    KUEUE_TUNED,
    NAMESPACE,
    QUEUE,
    Environment,
    System,
)
from devkit.localcluster.access import free_port
from devkit.localcluster.kueue import MultiKueueSettings

READY_TIMEOUT_SECONDS = 60.0
INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
REMOTE_QPS, REMOTE_BURST = 500.0, 1000
"""MultiKueue's remote clients in the rebuilt binary: the same as its clientConnection."""

SYSTEMS = {
    "dispatcher-fair": System(name="dispatcher-fair", kind="dispatcher",
                              worker_kueue=KUEUE_TUNED),
    "dispatcher-fair-wait": System(name="dispatcher-fair-wait", kind="dispatcher",
                                   worker_kueue=KUEUE_TUNED,
                                   dispatcher={"workers": {"whenLost": "Wait"}}),
    "dispatcher-fair-preempt": System(
        name="dispatcher-fair-preempt", kind="dispatcher", worker_kueue=KUEUE_TUNED,
        dispatcher={"placement": {"preemption": {"policy": "LowerPriority"}}}),
    "dispatcher-check": System(name="dispatcher-check", kind="dispatcher",
                               worker_kueue=KUEUE_TUNED, manager_kueue=KUEUE_TUNED,
                               dispatcher={"admissionCheck": {
                                   "controllerName": CHECK_CONTROLLER}}),
    "multikueue-default": System(name="multikueue-default", kind="multikueue",
                                 worker_kueue=KUEUE_DEFAULTS, manager_kueue=KUEUE_DEFAULTS),
    "dispatcher": System(name="dispatcher", kind="dispatcher"),
    "multikueue-shipped": System(name="multikueue-shipped", kind="multikueue",
                                 worker_kueue=KUEUE_SHIPPED, manager_kueue=KUEUE_SHIPPED),
    "multikueue-qps": System(name="multikueue-qps", kind="multikueue",
                             worker_kueue=KUEUE_QPS, manager_kueue=KUEUE_QPS),
    "multikueue-tuned": System(name="multikueue-tuned", kind="multikueue",
                               worker_kueue=KUEUE_TUNED, manager_kueue=KUEUE_TUNED),
    "multikueue-tuned-incremental": System(
        name="multikueue-tuned-incremental", kind="multikueue", worker_kueue=KUEUE_TUNED,
        manager_kueue=KUEUE_TUNED, multikueue=MultiKueueSettings(dispatcher_name=INCREMENTAL)),
    "multikueue-qps-remote-qps": System(
        name="multikueue-qps-remote-qps", kind="multikueue", worker_kueue=KUEUE_QPS,
        manager_kueue=KUEUE_QPS,
        multikueue=MultiKueueSettings(remote_qps=REMOTE_QPS, remote_burst=REMOTE_BURST)),
    "multikueue-tuned-remote-qps": System(
        name="multikueue-tuned-remote-qps", kind="multikueue", worker_kueue=KUEUE_TUNED,
        manager_kueue=KUEUE_TUNED,
        multikueue=MultiKueueSettings(remote_qps=REMOTE_QPS, remote_burst=REMOTE_BURST)),
}
"""In run order: the systems alternate, each on fresh clusters. The fair mode's workers
run Kueue with the same settings as the tuned MultiKueue's workers; `dispatcher-check`
is the symmetric setting: the same manager-side Kueue (settings, ClusterQueue, quota) as
MultiKueue's, with the dispatcher as its AdmissionCheck instead; `-wait` keeps a
lost worker's jobs there (`workers.whenLost: Wait`; only the frozen scenario differs);
`-preempt` lets an urgent job preempt lower-priority ones
(`placement.preemption.policy: LowerPriority`; only the preemption scenario differs).
`multikueue-shipped` runs the configuration Kueue's manifests install (clientConnection
50/100, 5 Workload reconcilers); `multikueue-qps` raises only clientConnection (the
issue's 1.3 jobs/s setting); `-tuned` also gives the Workload and TrainJob reconcilers
20 workers; `-remote-qps` also raises the rate limit of MultiKueue's clients for the
workers (a rebuilt binary)."""


def dispatcher_config(env: Environment, port: int) -> dict[str, Any]:
    fair = env.system.worker_kueue is not None
    queues = {"localQueue": QUEUE, "clusterQueue": QUEUE} if fair else {}
    settings = dict(env.system.dispatcher)
    workers = settings.pop("workers", {})
    return {
        **settings,
        "managerKubeconfig": str(env.plane.clusters["manager"].kubeconfig_path),
        "claim": {"namespaces": [NAMESPACE]},
        "mirror": {"origin": "bench", "retainFinishedSeconds": 0},  # as MultiKueue: none kept
        "server": {"host": "127.0.0.1", "port": port, "statusPort": 0, "logsPort": 0},
        "client": DISPATCHER_CLIENT,
        "workers": {**workers, "fromCRD": False, "probeIntervalSeconds": 2,
                    "lostTimeoutSeconds": env.lost_timeout_seconds, "static": [
                        {"name": w, "kubeconfig": str(env.plane.clusters[w].kubeconfig_path),
                         "quota": env.quota, **queues} for w in env.workers]},
    }


def keep_kueue_logs(env: Environment, log_name: str) -> None:
    """Copy every Kueue log of the run beside the results (`*.log` is not committed)."""
    for name, cluster in env.plane.clusters.items():
        source = cluster.directory / "kueue.log"
        if source.exists():
            shutil.copyfile(source, RESULTS / f"peer-{log_name}-{name}-kueue.log")


@asynccontextmanager
async def controllers(env: Environment, *, log_name: str = "") -> AsyncIterator[dict[str, int]]:
    """Run the system's own processes; yields their pids by name (Kueue's included).
    The dispatcher's log and, at the end, every Kueue log go to
    `bench/results/peer-<log_name>-*.log`."""
    log_name = log_name or env.system.name
    RESULTS.mkdir(parents=True, exist_ok=True)
    pids = {f"kueue/{name}": c.kueue.process.pid for name, c in env.plane.clusters.items()
            if c.kueue is not None and c.kueue.process.pid is not None}
    try:
        if env.system.kind != "dispatcher":
            yield pids
        else:
            async with _dispatcher(env, log_name) as pid:
                yield {**pids, "dispatcher": pid}
    finally:
        keep_kueue_logs(env, log_name)


@asynccontextmanager
async def _dispatcher(env: Environment, log_name: str) -> AsyncIterator[int]:
    """`dispatcher run`; with BENCH_PROFILE set, under py-spy (collapsed stacks to
    `bench/results/peer-<log_name>-pyspy.log`, written when it gets SIGINT)."""
    port = free_port()
    config_path = env.plane.directory / "peer-dispatcher.yaml"
    config_path.write_text(yaml.safe_dump(dispatcher_config(env, port)))
    argv = [sys.executable, "-m", "dispatcher", "run", "--config", str(config_path)]
    profiling = bool(os.environ.get("BENCH_PROFILE"))
    if profiling:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        argv = [py_spy, "record", "--format", "raw", "--rate", "200", "--subprocesses",
                "-o", str(RESULTS / f"peer-{log_name}-pyspy.log"), "--", *argv]
    with (RESULTS / f"peer-{log_name}-dispatcher.log").open("wb") as log:
        process = subprocess.Popen(  # noqa: ASYNC220 - started once, then only signalled
            argv, stdout=log, stderr=log)
        try:
            await wait_ready(port, process, timeout=READY_TIMEOUT_SECONDS)
            env.dispatcher_port = port
            yield process.pid
        finally:
            if profiling:
                process.send_signal(signal.SIGINT)
            else:
                process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
