"""Soak: a steady job rate and random faults for a long time, then the invariants.

    python -m bench soak --minutes 20 --rate 1

Starts a local manager and three workers, runs the dispatcher as a separate process (so
it can be SIGKILLed), a simulated trainer per worker, creates TrainJobs at a steady rate,
and every 15-40 s injects one fault at random: pause a worker (shorter or longer than
the lost timeout), kill and restart a worker's or the manager's API server, SIGKILL and
restart the dispatcher, delete a mirror by hand. At the end it stops submitting, waits
for every job to finish, checks the invariants of `devkit/invariants.py`, and writes a
JSON report to `bench/results/`.
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.harness import RESULTS, SAMPLE_RUNTIME
from devkit.factories import trainjob
from devkit.invariants import check_invariants
from devkit.localcluster import LocalControlPlane
from devkit.localcluster.cluster import DISPATCHER_NAMESPACE
from devkit.localcluster.simulated_trainer import RUN_SECONDS_ANNOTATION, SimulatedTrainer
from dispatcher.api import constants as c
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, MANAGED_BY_MULTIKUEUE, TRAINJOBS
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.resource import NAMESPACES, Resource

WORKERS = ("worker-a", "worker-b", "worker-c")
QUOTA = {"cpu": "12", "memory": "64Gi"}
NAMESPACE = "soak"


class DispatcherProcess:
    def __init__(self, config_path: Path, log_path: Path) -> None:
        self.argv = [sys.executable, "-m", "dispatcher", "run", "--config", str(config_path)]
        self.log = log_path.open("ab")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdout=self.log, stderr=self.log)

    def kill(self) -> None:
        if self.process:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


async def inject(fault: str, plane: LocalControlPlane, dispatcher: DispatcherProcess,
                 clients: dict[str, ClusterClient], lost_timeout: float) -> None:
    worker = plane.clusters[random.choice(WORKERS)]
    if fault == "pause-short":
        worker.pause()
        await asyncio.sleep(lost_timeout / 3)
        worker.resume()
    elif fault == "pause-long":
        worker.pause()
        await asyncio.sleep(lost_timeout * 2)
        worker.resume()
    elif fault == "restart-worker":
        await worker.restart()
    elif fault == "restart-manager":
        await plane.clusters["manager"].restart()
    elif fault == "kill-dispatcher":
        dispatcher.kill()
        await asyncio.sleep(1)
        dispatcher.start()
    elif fault == "delete-mirror":
        mirrors = (await Resource(clients[worker.name], TRAINJOBS).list(
            namespace=NAMESPACE))["items"]
        if mirrors:
            victim = random.choice(mirrors)["metadata"]["name"]
            await Resource(clients[worker.name], TRAINJOBS).delete(victim, namespace=NAMESPACE)


async def soak(minutes: float, rate: float, seed: int) -> dict[str, Any]:
    random.seed(seed)
    RESULTS.mkdir(parents=True, exist_ok=True)
    lost_timeout = 6.0
    async with LocalControlPlane() as plane:
        await plane.start(["manager", *WORKERS])
        clients = {n: await ClusterClient.from_kubeconfig(
            name=n, kubeconfig=cl.kubeconfig(),
            settings=ClientSettings(qps=500, burst=500, timeout_seconds=5))
            for n, cl in plane.clusters.items()}
        runtime = yaml.safe_load(
            SAMPLE_RUNTIME.read_text())
        for client in clients.values():
            await Resource(client, CLUSTER_TRAINING_RUNTIMES).apply(runtime, field_manager="soak")
            await Resource(client, NAMESPACES).create({"metadata": {"name": NAMESPACE}})
        config = {
            "managerKubeconfig": str(plane.clusters["manager"].kubeconfig_path),
            "claim": {"namespaces": [NAMESPACE]},
            "mirror": {"origin": NAMESPACE, "retainFinishedSeconds": 0},  # as MultiKueue: none kept
            "server": {"host": "127.0.0.1", "port": 0, "statusPort": 0, "logsPort": 0},
            "client": {"timeoutSeconds": 3},
            "gc": {"intervalSeconds": 5},
            "workers": {"fromCRD": False, "probeIntervalSeconds": 1,
                        "lostTimeoutSeconds": lost_timeout, "static": [
                            {"name": n, "kubeconfig": str(plane.clusters[n].kubeconfig_path),
                             "quota": QUOTA} for n in WORKERS]},
        }
        config_path = plane.directory / "dispatcher.yaml"
        config_path.write_text(yaml.safe_dump(config))
        dispatcher = DispatcherProcess(config_path, RESULTS / "soak-dispatcher.log")
        dispatcher.start()
        trainers = [asyncio.create_task(SimulatedTrainer(clients[n], run_seconds=4).run())
                    for n in WORKERS]
        faults: collections.Counter[str] = collections.Counter()
        created = 0
        started = time.monotonic()
        deadline = started + minutes * 60
        next_fault = started + random.uniform(15, 40)
        jobs = Resource(clients["manager"], TRAINJOBS)
        while time.monotonic() < deadline:
            try:
                await jobs.create(trainjob(
                    f"soak-{created:05d}", NAMESPACE, managed_by=MANAGED_BY_MULTIKUEUE,
                    annotations={RUN_SECONDS_ANNOTATION: str(random.uniform(2, 10))}),
                    namespace=NAMESPACE)
                created += 1
            except Exception as error:  # the manager may be restarting: try again later
                faults["create-failed"] += 1
                print(f"create failed: {error}", file=sys.stderr)
            if time.monotonic() >= next_fault:
                fault = random.choice(["pause-short", "pause-long", "restart-worker",
                                       "restart-manager", "kill-dispatcher", "delete-mirror"])
                print(f"{time.monotonic() - started:7.1f}s fault: {fault}", flush=True)
                await inject(fault, plane, dispatcher, clients, lost_timeout)
                faults[fault] += 1
                next_fault = time.monotonic() + random.uniform(15, 40)
            await asyncio.sleep(1 / rate)
        report = await drain_and_check(clients, created, faults, started)
        for task in trainers:
            task.cancel()
        dispatcher.stop()
        for client in clients.values():
            await client.close()
    (RESULTS / "soak.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


async def drain_and_check(clients: dict[str, ClusterClient], created: int,
                          faults: collections.Counter[str], started: float) -> dict[str, Any]:
    jobs = Resource(clients["manager"], TRAINJOBS)
    finish_deadline = time.monotonic() + 300
    states: collections.Counter[str] = collections.Counter()
    items: list[dict[str, Any]] = []
    while time.monotonic() < finish_deadline:
        items = (await jobs.list(namespace=NAMESPACE))["items"]
        states = collections.Counter(_state(j) for j in items)
        if states["Complete"] + states["Failed"] == len(items) and not any(
                j["metadata"].get("finalizers") for j in items):
            break
        await asyncio.sleep(2)
    evictions = sum(int((j["metadata"].get("annotations") or {}).get(
        c.ANNOTATION_EVICTIONS, 0)) for j in items)
    problems = await check_invariants(clients, NAMESPACE, origin=NAMESPACE,
                                      workers={w: QUOTA for w in WORKERS},
                                      system_namespace=DISPATCHER_NAMESPACE)
    return {"minutes": round((time.monotonic() - started) / 60, 1), "jobs_created": created,
            "states": dict(states), "evictions": evictions, "faults": dict(faults),
            "invariant_violations": problems}


def _state(job: dict[str, Any]) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond["type"] in ("Complete", "Failed") and cond["status"] == "True":
            return str(cond["type"])
    return "Placed" if (job["metadata"].get("annotations") or {}).get(
        c.ANNOTATION_CLUSTER) else "Waiting"
