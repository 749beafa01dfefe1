"""`dispatcher demo`: the whole story on this machine, in about a minute.

Starts a real local control plane (a manager and two workers: etcd + kube-apiserver),
with the real Kubeflow Trainer and JobSet on every cluster and, on each worker,
kube-scheduler and kwok nodes that hold its quota; installs the CRDs and a sample
runtime, registers both workers with WorkerCluster objects, runs the dispatcher, submits
the sample TrainJobs of `config/samples/`, and shows live where each runs and its state
until all are done; then where the workers' schedulers put the pods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from devkit.localcluster import LocalControlPlane
from devkit.localcluster.trainer import chain_crd_files, kwok_timed, pods_by_node
from devkit.localenv import CLUSTERS, QUOTAS, server_config, start_chain
from dispatcher.admin import ensure_namespace, register_worker
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, TRAINJOBS
from dispatcher.app import Dispatcher
from dispatcher.claim import Claim
from dispatcher.config import ClaimConfig, DispatcherConfig
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.resource import Resource
from dispatcher.observability.jobstate import JobLine, job_state

SAMPLES = Path(__file__).resolve().parents[1] / "config" / "samples"
NAMESPACE = "demo"
_FINAL = {"Complete", "Failed", "NotClaimed"}
_KIND = TrainJobKind()
_CLAIM = Claim(ClaimConfig())
"""The demo's dispatcher claims what the default configuration claims."""


def _table(jobs: list[dict[str, Any]], placements: dict[str, str], metrics_url: str) -> Table:
    table = Table(title=f"TrainJobs on the manager (namespace {NAMESPACE}) — metrics: "
                        f"{metrics_url}")
    for column in ("TrainJob", "Worker", "State", "Why / where"):
        table.add_column(column)
    colors = {"Complete": "green", "Running": "cyan", "Failed": "red", "Placed": "blue"}
    for job in sorted(jobs, key=lambda j: j["metadata"]["name"]):
        state = _line(job, placements)
        color = colors.get(state.state, "yellow")
        table.add_row(job["metadata"]["name"], state.worker or "-",
                      f"[{color}]{state.state}[/{color}]", state.message)
    return table


def _line(job: dict[str, Any], placements: dict[str, str]) -> JobLine:
    placed_on = placements.get(job["metadata"].get("uid", ""), "")
    return job_state(job, claim=_CLAIM, kind=_KIND, placed_on=placed_on)


async def _client(kubeconfig: dict[str, Any], name: str) -> ClusterClient:
    return await ClusterClient.from_kubeconfig(
        name=name, kubeconfig=kubeconfig,
        settings=ClientSettings(qps=500, burst=500, timeout_seconds=10))


async def run_demo(*, run_seconds: float, port: int) -> int:
    console = Console()
    started = time.monotonic()
    console.print("[bold]Starting a local manager and two workers[/bold] "
                  "(real etcd + kube-apiserver on 127.0.0.1)...")
    async with LocalControlPlane() as plane:
        clusters = await plane.start(CLUSTERS, controllers=CLUSTERS,
                                     crd_files=chain_crd_files())
        await start_chain(plane)
        console.print(f"control plane and Trainer chain ready in "
                      f"{time.monotonic() - started:.1f}s; kubeconfigs in {plane.directory}")
        clients = {n: await _client(c.kubeconfig(), n) for n, c in clusters.items()}
        try:
            code = await _run(console, clusters, clients, run_seconds=run_seconds, port=port)
        finally:
            for client in clients.values():
                await client.close()
    console.print(f"demo finished in {time.monotonic() - started:.0f}s")
    return code


async def _run(console: Console, clusters: dict[str, Any], clients: dict[str, ClusterClient],
               *, run_seconds: float, port: int) -> int:
    manager = clients["manager"]
    runtime = yaml.safe_load((SAMPLES / "clustertrainingruntime-torch.yaml").read_text())
    for client in clients.values():
        await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(
            kwok_timed(runtime, run_seconds=run_seconds), field_manager="demo")
    config = DispatcherConfig.model_validate({
        "server": server_config(port),
        "workers": {"probeIntervalSeconds": 2},
    })
    for name in ("worker-a", "worker-b"):
        await register_worker(manager, namespace=config.namespace, name=name,
                              kubeconfig=clusters[name].kubeconfig(), quota=QUOTAS[name])
    console.print("registered WorkerClusters worker-a "
                  f"{QUOTAS['worker-a']} and worker-b {QUOTAS['worker-b']}")
    dispatcher = Dispatcher(config, manager_kubeconfig=clusters["manager"].kubeconfig(),
                            instance="demo")
    async with asyncio.TaskGroup() as group:
        service = group.create_task(dispatcher.run(), name="dispatcher")
        async with asyncio.timeout(60):
            await dispatcher.ready.wait()
        assert dispatcher.server is not None
        metrics_url = f"http://127.0.0.1:{dispatcher.server.port}/metrics"
        await ensure_namespace(manager, NAMESPACE)
        jobs = Resource(manager, TRAINJOBS)
        for sample in yaml.safe_load_all((SAMPLES / "trainjobs.yaml").read_text()):
            await jobs.create(sample, namespace=NAMESPACE)
        seen: dict[tuple[str, str], tuple[str, str]] = {}
        code = await _watch(console, jobs, metrics_url, dispatcher.placements,
                            lambda: _pods(clients, seen))
        if not console.is_terminal:  # off a terminal, Live leaves its last line open
            console.line()
        console.print("where the pods ran (each worker's kube-scheduler chose the kwok "
                      "nodes; finished mirrors and their pods stay an hour, "
                      "mirror.retainFinishedSeconds):")
        for (worker, pod), (node_name, phase) in sorted(seen.items()):
            console.print(f"  {worker:9} {pod:34} {node_name:18} {phase}")
        service.cancel()
    return code


async def _pods(clients: dict[str, ClusterClient],
                seen: dict[tuple[str, str], tuple[str, str]]) -> None:
    """Note where each pod of the demo's jobs runs on the workers, as it goes."""
    for worker in QUOTAS:
        for pod, node_name, phase in await pods_by_node(clients[worker], NAMESPACE):
            seen[(worker, pod)] = (node_name, phase)


async def _watch(console: Console, jobs: Resource, metrics_url: str,
                 placements: Callable[[], dict[str, str]],
                 each_tick: Callable[[], Awaitable[None]]) -> int:
    deadline = time.monotonic() + 180
    with Live(console=console, refresh_per_second=4) as live:
        while time.monotonic() < deadline:
            await each_tick()
            items = (await jobs.list(namespace=NAMESPACE))["items"]
            placed = placements()
            live.update(_table(items, placed, metrics_url))
            states = [_line(j, placed).state for j in items]
            recorded = any(j["metadata"]["uid"] in placed for j in items)
            if items and all(s in _FINAL for s in states) and not recorded:
                return 0 if "Failed" not in states else 1
            await asyncio.sleep(0.5)
    console.print("[red]not all jobs finished in time[/red]")
    return 1
