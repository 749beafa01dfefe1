"""`dispatcher up` (`make up`): a local manager and two workers that stay up until Ctrl-C.

Like `dispatcher demo`, but for trying things by hand: it starts the real local control
plane (etcd, a kube-apiserver per cluster, the manager's garbage collector), installs the
CRDs, the sample runtime, the opt-in policy (label `dispatcher.trainjob.io/dispatch=true`
sets `spec.managedBy`) and the Trainer version ConfigMap the Kubeflow SDK reads,
registers both workers as WorkerCluster objects, and runs the dispatcher (with its
status page). Every cluster runs the real Kubeflow Trainer and JobSet controllers
(`localcluster/trainer.py`); each worker also runs kube-scheduler and kwok with fake
nodes that hold exactly its quota (`WORKER_NODES`), so a mirror really becomes a JobSet,
Jobs and pods placed on those nodes, which kwok runs for `--jobs-seconds`. Then it prints
`export KUBECONFIG=...` lines, the URLs and how to read a job's logs as a namespace
user (`user.kubeconfig`: a ServiceAccount token that may edit TrainJobs in `default`,
what `dispatcher logs` hands on), and waits. SIGINT or SIGTERM stops every
process it started.

Everything lives in one directory (default `~/.cache/trainjob-dispatcher/up/`): a lock
file holding the pid (an `flock`, so a crashed run never blocks the next), `up.json`
describing the running environment, one kubeconfig per cluster, and the clusters' data,
which is wiped at the next start. A second `dispatcher up` finds the lock held and says
which process holds it.

With `--kueue` each worker also runs a real Kueue (built on first use by
`controlplane/build.sh kueue`, about 3.5 minutes on 2 cores; `make up-kueue` builds it
first) with a ClusterQueue `dispatcher` holding the worker's quota and a LocalQueue
`default` in the `default` namespace; the WorkerClusters name both, so mirrors wait for
that Kueue's admission, and jobs submitted straight to a worker's LocalQueue compete
with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from devkit.localcluster import LocalCluster, LocalControlPlane
from devkit.localcluster.identities import namespace_user_token, with_token
from devkit.localcluster.trainer import NodePool, chain_crd_files, kwok_timed
from dispatcher.api import constants as c
from dispatcher.api import trainer as t
from dispatcher.app import Dispatcher
from dispatcher.config import DispatcherConfig
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import Resource, ResourceKind

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "config" / "samples"
OPT_IN_POLICY = REPO_ROOT / "deploy" / "mutatingadmissionpolicy.yaml"
CLUSTERS = ("manager", "worker-a", "worker-b")
NODE_SHAPE = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2", "pods": "110"}
WORKER_NODES = {"worker-a": NodePool(count=2, allocatable=NODE_SHAPE),
                "worker-b": NodePool(count=4, allocatable=NODE_SHAPE)}
QUOTAS = {name: {resource: amount for resource, amount in nodes.total().items()
                 if resource != "pods"} for name, nodes in WORKER_NODES.items()}
"""What each worker's nodes hold (worker-a: 8 CPU, 32Gi, 4 GPUs; worker-b: twice that)."""
KUEUE_CLUSTER_QUEUE = "dispatcher"
KUEUE_LOCAL_QUEUE = "default"
KUEUE_NAMESPACES = ("default",)
INFO_FILE = "up.json"
USER_NAMESPACE = "default"
USER_KUBECONFIG = "user.kubeconfig"
"""A kubeconfig of the manager for a user of `USER_NAMESPACE`, with a token."""
LOCK_FILE = "up.lock"
_CONFIGMAPS = ResourceKind("", "v1", "configmaps", namespaced=True)
_ADMISSION = {
    "MutatingAdmissionPolicy": ResourceKind("admissionregistration.k8s.io", "v1",
                                            "mutatingadmissionpolicies", namespaced=False),
    "MutatingAdmissionPolicyBinding": ResourceKind(
        "admissionregistration.k8s.io", "v1", "mutatingadmissionpolicybindings",
        namespaced=False),
}


def default_directory() -> Path:
    cache = os.environ.get("TRAINJOB_DISPATCHER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "trainjob-dispatcher")
    return Path(cache) / "up"


class AlreadyUp(Exception):
    """Another `dispatcher up` holds the lock of this directory."""

    def __init__(self, directory: Path, pid: int | None, info: dict[str, Any]) -> None:
        self.directory = directory
        self.pid = pid
        self.info = info
        since = info.get("started", "an unknown time")
        super().__init__(
            f"a local environment is already up in {directory} (pid {pid or 'unknown'}, "
            f"since {since}); stop it with Ctrl-C where it runs, or kill -INT {pid}")


class PortInUse(Exception):
    """The status page's port, or one of the two after it (/metrics, logs), is taken."""


def server_config(port: int) -> dict[str, Any]:
    """The status page on `port`, /metrics on the next one, the logs endpoint on the one
    after (all picked when 0), all on 127.0.0.1."""
    return {"host": "127.0.0.1", "port": port + 1 if port else 0,
            "statusHost": "127.0.0.1", "statusPort": port,
            "logsHost": "127.0.0.1", "logsPort": port + 2 if port else 0}


def check_port(port: int) -> None:
    if port == 0:
        return
    for taken in (port, port + 1, port + 2):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", taken))
            except OSError:
                raise PortInUse(f"port {taken} on 127.0.0.1 is in use (`make demo`?); "
                                "pass --port 0 to pick free ones") from None


class UpLock:
    """An exclusive `flock` on `<directory>/up.lock`, released when the process ends."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        file = (self.directory / LOCK_FILE).open("a+")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            text = file.read().strip()
            file.close()
            raise AlreadyUp(self.directory, int(text) if text.isdigit() else None,
                            read_info(self.directory)) from None
        file.seek(0)
        file.truncate()
        file.write(f"{os.getpid()}\n")
        file.flush()
        self._file = file

    def release(self) -> None:
        if self._file is not None:
            self._file.truncate(0)
            self._file.close()
            self._file = None


def read_info(directory: Path) -> dict[str, Any]:
    try:
        info: dict[str, Any] = json.loads((directory / INFO_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return info


def describe(info: dict[str, Any]) -> str:
    """The lines a person copies: kubeconfigs, kubectl, URLs."""
    lines = [f"export KUBECONFIG={path}  # {name}" for name, path in info["kubeconfigs"].items()]
    if info.get("kubectl"):
        lines.append(f"export PATH={Path(info['kubectl']).parent}:$PATH  # kubectl "
                     f"{info.get('kubernetesVersion', '')}".rstrip())
    lines += [f"status page: {info['statusPage']}" if info.get("statusPage") else
              "status page: off", f"metrics: {info['metrics']}"]
    if info.get("logs"):
        lines.append(f"logs of a job in {USER_NAMESPACE}, as its user (a token that may edit "
                     f"TrainJobs there): DISPATCHER_LOGS_URL={info['logs']} dispatcher logs "
                     f"{USER_NAMESPACE}/NAME --kubeconfig {info['userKubeconfig']}")
    workers = [name for name in info["kubeconfigs"] if name != "manager"]
    if workers:
        lines.append(f"the real Trainer, JobSet and kwok nodes run the jobs: KUBECONFIG="
                     f"{info['kubeconfigs'][workers[0]]} kubectl get jobsets,pods -A -o wide")
    if info.get("kueue"):
        queues = info["kueue"]
        lines.append(f"workers run Kueue: ClusterQueue {queues['clusterQueue']}, LocalQueue "
                     f"{queues['localQueue']} in namespace(s) "
                     f"{', '.join(queues['namespaces'])}")
    return "\n".join(lines)


@dataclass
class Environment:
    """What is running, for `describe` and `up.json`."""

    directory: Path
    plane: LocalControlPlane
    dispatcher: Dispatcher

    def info(self) -> dict[str, Any]:
        assert self.dispatcher.server is not None
        base = f"http://127.0.0.1:{self.dispatcher.server.port}"
        page = self.dispatcher.status_server
        kubectl = self.plane.binaries / "kubectl"
        return {
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kubeconfigs": {name: str(self.directory / f"{name}.kubeconfig")
                            for name in self.plane.clusters},
            "kubectl": str(kubectl) if kubectl.exists() else "",
            "kubernetesVersion": self.plane.binaries.name,
            "statusPage": f"http://127.0.0.1:{page.port}/" if page is not None else "",
            "metrics": f"{base}/metrics",
            "logs": (f"http://127.0.0.1:{self.dispatcher.logs_server.port}"
                     if self.dispatcher.logs_server is not None else ""),
            "userKubeconfig": str(self.directory / USER_KUBECONFIG),
        }


async def _client(cluster: LocalCluster) -> ClusterClient:
    from dispatcher.kube.client import ClientSettings

    return await ClusterClient.from_kubeconfig(
        name=cluster.name, kubeconfig=cluster.kubeconfig(),
        settings=ClientSettings(qps=200, burst=200, timeout_seconds=10))


async def install_trainer_extras(manager: ClusterClient) -> None:
    """The opt-in policy and the ConfigMap a manager running Kubeflow Trainer has."""
    from dispatcher.admin import ensure_namespace

    for doc in yaml.safe_load_all(OPT_IN_POLICY.read_text()):
        if doc:
            await Resource(manager, _ADMISSION[doc["kind"]]).apply(doc, field_manager="up")
    await ensure_namespace(manager, t.SYSTEM_NAMESPACE)
    await Resource(manager, _CONFIGMAPS).apply({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": t.PUBLIC_CONFIGMAP, "namespace": t.SYSTEM_NAMESPACE},
        "data": {t.PUBLIC_VERSION_KEY: t.TRAINER_RELEASE},
    }, field_manager="up")


async def wait_for_opt_in(manager: ClusterClient, *, timeout: float = 30.0) -> None:
    """Until a dry-run create of a labelled TrainJob comes back with managedBy set: an
    admission policy takes a moment to load (503 or no mutation until then)."""
    probe = {"apiVersion": t.API_VERSION, "kind": "TrainJob",
             "metadata": {"name": "opt-in-probe", "labels": {c.LABEL_DISPATCH: "true"}},
             "spec": {"runtimeRef": {"name": "torch-distributed"}}}
    deadline = time.monotonic() + timeout
    while True:
        try:
            created = await manager.request(
                "POST", t.TRAINJOBS.path(namespace="default"), query=[("dryRun", "All")],
                body=probe, verb="create")
            if created["spec"].get("managedBy") == t.MANAGED_BY_MULTIKUEUE:
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError("the opt-in policy did not take effect")
        await asyncio.sleep(0.5)


async def _start_worker_kueue(plane: LocalControlPlane, clients: dict[str, ClusterClient]
                              ) -> None:
    """A real Kueue on every worker, with one ClusterQueue holding the worker's quota."""
    from devkit.localcluster.kueue_objects import setup_queues

    await asyncio.gather(*(plane.clusters[name].start_kueue() for name in QUOTAS))
    for name, quota in QUOTAS.items():
        await setup_queues(clients[name], cluster_queue_name=KUEUE_CLUSTER_QUEUE,
                           local_queue_name=KUEUE_LOCAL_QUEUE,
                           namespaces=list(KUEUE_NAMESPACES), quota=quota)


async def start_chain(plane: LocalControlPlane) -> None:
    """The real Trainer and JobSet on every cluster; the workers' nodes, scheduler, kwok."""
    await asyncio.gather(*(cluster.start_trainer(WORKER_NODES.get(name))
                           for name, cluster in plane.clusters.items()))


async def _prepare(plane: LocalControlPlane, clients: dict[str, ClusterClient],
                   config: DispatcherConfig, *, kueue: bool, run_seconds: float) -> None:
    from dispatcher.admin import register_worker

    runtime = yaml.safe_load((SAMPLES / "clustertrainingruntime-torch.yaml").read_text())
    for client in clients.values():
        await Resource(client, t.CLUSTER_TRAINING_RUNTIMES).apply(
            kwok_timed(runtime, run_seconds=run_seconds), field_manager="up")
    await install_trainer_extras(clients["manager"])
    if kueue:
        await _start_worker_kueue(plane, clients)
    for name, quota in QUOTAS.items():
        await register_worker(clients["manager"], namespace=config.namespace, name=name,
                              kubeconfig=plane.clusters[name].kubeconfig(), quota=quota,
                              local_queue=KUEUE_LOCAL_QUEUE if kueue else "",
                              cluster_queue=KUEUE_CLUSTER_QUEUE if kueue else "")


def _workers_open(dispatcher: Dispatcher) -> bool:
    registry = dispatcher.registry
    return registry is not None and len(registry.workers) == len(QUOTAS) and all(
        w.usable() and w.collected for w in registry.workers.values())


def _write_kubeconfigs(plane: LocalControlPlane, directory: Path) -> None:
    for name, cluster in plane.clusters.items():
        target = directory / f"{name}.kubeconfig"
        target.write_text(cluster.kubeconfig_path.read_text())
        target.chmod(0o600)


async def _write_user_kubeconfig(plane: LocalControlPlane, manager: ClusterClient,
                                 directory: Path) -> None:
    """The manager's kubeconfig for a user of `USER_NAMESPACE` with a token (what
    `dispatcher logs` hands on): ServiceAccount `trainjob-user`, which may edit TrainJobs
    there (and read its events), nothing else."""
    token = await namespace_user_token(manager, USER_NAMESPACE, name="trainjob-user")
    target = directory / USER_KUBECONFIG
    target.write_text(yaml.safe_dump(with_token(
        plane.clusters["manager"].kubeconfig(), user="trainjob-user", token=token,
        namespace=USER_NAMESPACE)))
    target.chmod(0o600)


async def run_up(*, directory: Path, port: int, run_seconds: float, kueue: bool = False,
                 out: IO[str] = sys.stdout) -> None:
    """Start everything, print how to reach it, run until cancelled, stop everything."""
    lock = UpLock(directory)
    lock.acquire()
    try:
        check_port(port)
        shutil.rmtree(directory / "clusters", ignore_errors=True)
        print(f"starting a local manager and workers in {directory} ...", file=out, flush=True)
        async with LocalControlPlane(directory=directory / "clusters") as plane:
            await plane.start(CLUSTERS, controllers=CLUSTERS,
                              crd_files=chain_crd_files(kueue=kueue))
            await start_chain(plane)
            clients = {n: await _client(cl) for n, cl in plane.clusters.items()}
            try:
                await _serve(plane, clients, directory=directory, port=port,
                             run_seconds=run_seconds, kueue=kueue, out=out)
            finally:
                for client in clients.values():
                    await client.close()
    finally:
        with contextlib.suppress(OSError):
            (directory / INFO_FILE).unlink()
        lock.release()
        print("stopped", file=out, flush=True)


async def _serve(plane: LocalControlPlane, clients: dict[str, ClusterClient], *,
                 directory: Path, port: int, run_seconds: float, kueue: bool,
                 out: IO[str]) -> None:
    config = DispatcherConfig.model_validate({
        "server": server_config(port),
        "workers": {"probeIntervalSeconds": 2},
    })
    await _prepare(plane, clients, config, kueue=kueue, run_seconds=run_seconds)
    dispatcher = Dispatcher(config, manager_kubeconfig=plane.clusters["manager"].kubeconfig(),
                            instance="up")
    async with asyncio.TaskGroup() as group:
        group.create_task(dispatcher.run(), name="dispatcher")
        async with asyncio.timeout(60):
            await dispatcher.ready.wait()
            while True:  # worker connections have no event to wait on
                if _workers_open(dispatcher):
                    break
                await asyncio.sleep(0.2)
        await wait_for_opt_in(clients["manager"])
        _write_kubeconfigs(plane, directory)
        await _write_user_kubeconfig(plane, clients["manager"], directory)
        info = Environment(directory, plane, dispatcher).info()
        if kueue:
            info["kueue"] = {"clusterQueue": KUEUE_CLUSTER_QUEUE,
                             "localQueue": KUEUE_LOCAL_QUEUE,
                             "namespaces": list(KUEUE_NAMESPACES)}
        (directory / INFO_FILE).write_text(json.dumps(info, indent=2))
        print(describe(info), file=out)
        print("ready: Ctrl-C stops every process started here", file=out, flush=True)
        await asyncio.Event().wait()
