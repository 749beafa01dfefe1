"""The real Kubeflow Trainer chain on a local cluster: TrainJob -> JobSet -> Jobs -> Pods.

`TrainerChain(cluster, nodes=...)` runs, for one `ServedCluster`, the Trainer controller
manager and the JobSet controller (webhook serving certificates for 127.0.0.1 signed by
the cluster's own CA, as for Kueue), and with `nodes`, kube-scheduler and kwok with that
many fake Nodes of the given allocatable: the worker's scheduler really places the pods,
kwok plays their kubelet (Running, then Succeeded after the delay its stages read from
the pod's annotations; a pod labelled `pod-container-running-failed.stage.kwok.x-k8s.io:
"true"` fails), and a job too big for the nodes stays Pending. The cluster must run the
controller manager (its Job controller makes the pods) and serve the Trainer's and
JobSet's CRDs (`TrainerChainFiles.trainer_crds()`, `.jobset_crds()`).

`await start()` starts the processes, waits for their health endpoints, points their
webhook configurations at them (`url` + `caBundle` instead of a Service) and returns once
an admission request through each webhook server succeeds. `await stop()` removes the
webhook configurations and ends every process; nothing is left running.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devkit.localcluster.access import CRD_DIR, admin_client, free_port
from devkit.localcluster.binaries import TrainerChainFiles, ensure_trainer_chain
from devkit.localcluster.pki import sign_server_certificate
from devkit.localcluster.pod_logs import default_logs_config
from devkit.localcluster.processes import ManagedProcess, wait_healthy
from devkit.localcluster.webhooks import pointed_at
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import PODS, Resource, ResourceKind, status_of

if TYPE_CHECKING:
    from devkit.localcluster.access import ServedCluster

log = logging.getLogger(__name__)
JSON = dict[str, Any]

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
POD_FAILS_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
KWOK_PATCH_MANAGER = "devkit.trainjob-dispatcher.io/kwok"
RUNS_UNTIL_ENDED = "720h"
"""How long a pod runs under kwok when nothing says otherwise: until a test ends it."""
NODES = ResourceKind("", "v1", "nodes", namespaced=False)
JOBSETS = ResourceKind("jobset.x-k8s.io", "v1alpha2", "jobsets", namespaced=True)
CLUSTER_RUNTIMES = ResourceKind("trainer.kubeflow.org", "v1alpha1",
                                "clustertrainingruntimes", namespaced=False)
READY_TIMEOUT_SECONDS = 90.0
_FIELD_MANAGER = "trainjob-dispatcher-localcluster"
_POLL_SECONDS = 0.2


class TrainerChainError(RuntimeError):
    """A part of the chain did not start, or its webhooks did not answer."""


@dataclass(frozen=True)
class NodePool:
    """Fake nodes for a worker: `count` of them, each with `allocatable`."""

    count: int
    allocatable: dict[str, str] = field(default_factory=lambda: {
        "cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8", "pods": "110"})

    def total(self) -> dict[str, str]:
        """What all the nodes hold together, as quantities (for a worker's quota)."""
        from dispatcher.placement.quantity import format_quantity, parse_quantity

        return {name: format_quantity(parse_quantity(amount) * self.count)
                for name, amount in self.allocatable.items()}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def node(name: str, allocatable: dict[str, str]) -> JSON:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                                    "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64"}},
            "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)}}


class _WebhookServer:
    """One controller with a webhook server: its process, ports and certificates."""

    def __init__(self, cluster: ServedCluster, *, name: str, manifests: Path) -> None:
        self.name = name
        self.manifests = manifests
        self.directory = cluster.directory / name
        self.health_port, self.webhook_port = free_port(), free_port()
        self.base_url = f"https://127.0.0.1:{self.webhook_port}"
        self.cert, self.key = sign_server_certificate(cluster.certs,
                                                      common_name=f"{name}-webhook")
        self.process: ManagedProcess | None = None

    def write_certificates(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "tls.crt").write_bytes(self.cert)
        (directory / "tls.key").write_bytes(self.key)

    def configurations(self, ca_bundle: str) -> list[tuple[ResourceKind, JSON]]:
        manifests = [d for d in yaml.safe_load_all(self.manifests.read_text()) if d]
        return pointed_at(manifests, prefix=self.name, base_url=self.base_url,
                          ca_bundle=ca_bundle)

    async def wait_healthy(self, deadline: float) -> None:
        assert self.process is not None
        await wait_healthy(self.process, f"http://127.0.0.1:{self.health_port}/readyz",
                           deadline=deadline, error=TrainerChainError,
                           poll_seconds=_POLL_SECONDS)


class TrainerChain:
    """The Trainer and JobSet controllers (and, for a worker, its scheduler and kwok)."""

    def __init__(self, cluster: ServedCluster, *, nodes: NodePool | None = None,
                 files: TrainerChainFiles | None = None) -> None:
        self.cluster = cluster
        self.nodes = nodes
        self.files = files or ensure_trainer_chain()
        self.ca_bundle = _b64(cluster.certs.ca_cert.read_bytes())
        kubeconfig = {"KUBECONFIG": str(cluster.kubeconfig_path)}
        self.jobset = _WebhookServer(cluster, name="jobset",
                                     manifests=self.files.jobset / "webhook.yaml")
        self.trainer = _WebhookServer(cluster, name="trainer",
                                      manifests=self.files.trainer / "webhook.yaml")
        jobset_certs = self.jobset.directory / "certs"
        self.jobset.write_certificates(jobset_certs)
        jobset_config = self._write_config(self.jobset, {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.jobset.webhook_port,
                        "certDir": str(jobset_certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.jobset.health_port}"},
        })
        self.jobset.process = ManagedProcess(
            name=f"{cluster.name}/jobset", env=kubeconfig,
            argv=[str(self.files.jobset / "jobset"), f"--config={jobset_config}",
                  "--metrics-bind-address=0",
                  f"--health-probe-bind-address=127.0.0.1:{self.jobset.health_port}"],
            log_path=cluster.directory / "jobset.log")
        # The Trainer reads its serving certificate from controller-runtime's default
        # directory under TMPDIR; it has no setting for another.
        temp = self.trainer.directory / "tmp"
        self.trainer.write_certificates(temp / "k8s-webhook-server" / "serving-certs")
        trainer_config = self._write_config(self.trainer, {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.trainer.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": self.trainer.webhook_port},
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
        })
        self.trainer.process = ManagedProcess(
            name=f"{cluster.name}/trainer", env={**kubeconfig, "TMPDIR": str(temp)},
            argv=[str(self.files.trainer / "trainer-controller-manager"),
                  f"--config={trainer_config}"],
            log_path=cluster.directory / "trainer.log")
        self.scheduler: ManagedProcess | None = None
        self.kwok: ManagedProcess | None = None
        self.pod_logs: Path | None = None
        """With nodes: where `pod_logs.serve_pod_logs` writes the logs it gives a pod."""
        if nodes is not None:
            self.scheduler = ManagedProcess(
                name=f"{cluster.name}/kube-scheduler",
                argv=[str(cluster.binaries / "kube-scheduler"),
                      f"--kubeconfig={cluster.kubeconfig_path}", "--leader-elect=false",
                      "--secure-port=0", "--v=0"],
                log_path=cluster.directory / "kube-scheduler.log")
            self.kwok = self._kwok(cluster)

    def _kwok(self, cluster: ServedCluster) -> ManagedProcess:
        """kwok for the worker's nodes, serving their kubelet API at 127.0.0.1 (the nodes'
        InternalIP and kubelet port, where the API server asks for `pods/log`) with a
        certificate of the cluster's CA, the pods' logs from files (`pod_logs`)."""
        directory = cluster.directory / "kwok"
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = sign_server_certificate(cluster.certs, common_name="kwok-kubelet")
        (directory / "tls.crt").write_bytes(cert)
        (directory / "tls.key").write_bytes(key)
        self.pod_logs = directory / "pod-logs"
        port = free_port()
        return ManagedProcess(
            name=f"{cluster.name}/kwok",
            argv=[str(self.files.kwok / "kwok"), f"--kubeconfig={cluster.kubeconfig_path}",
                  "--manage-all-nodes=false",
                  f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                  "--cidr=10.0.0.0/24", "--node-ip=127.0.0.1", f"--node-port={port}",
                  f"--server-address=127.0.0.1:{port}",
                  f"--tls-cert-file={directory / 'tls.crt'}",
                  f"--tls-private-key-file={directory / 'tls.key'}",
                  "--enable-crds=Logs", f"--config={default_logs_config(self.pod_logs)}",
                  *(f"--config={stage}" for stage in self.files.kwok_stages())],
            log_path=cluster.directory / "kwok.log")

    def _write_config(self, server: _WebhookServer, config: JSON) -> Path:
        server.directory.mkdir(parents=True, exist_ok=True)
        path = server.directory / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    @property
    def processes(self) -> list[ManagedProcess]:
        return [p for p in (self.jobset.process, self.trainer.process, self.scheduler,
                            self.kwok) if p is not None]

    async def start(self, *, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        client = await admin_client(self.cluster)
        try:
            for process in self.processes:
                process.start()
            await asyncio.gather(self.jobset.wait_healthy(deadline),
                                 self.trainer.wait_healthy(deadline))
            for server in (self.jobset, self.trainer):
                for kind, body in server.configurations(self.ca_bundle):
                    await Resource(client, kind).apply(body, field_manager=_FIELD_MANAGER)
            await self._wait_admission(client, deadline)
            if self.nodes is not None:
                for i in range(self.nodes.count):
                    await Resource(client, NODES).apply(
                        node(f"{self.cluster.name}-node-{i}", self.nodes.allocatable),
                        field_manager=_FIELD_MANAGER)
        except BaseException:
            self.kill()
            raise
        finally:
            await client.close()
        log.info("%s: Trainer chain ready%s", self.cluster.name,
                 f" with {self.nodes.count} kwok nodes" if self.nodes else "")

    async def _wait_admission(self, client: ClusterClient, deadline: float) -> None:
        """Dry-run creates through JobSet's and the Trainer's webhooks, until both answer."""
        probes = [
            (JOBSETS.path(namespace="default"), {
                "apiVersion": JOBSETS.api_version, "kind": "JobSet",
                "metadata": {"name": "harness-webhook-probe", "namespace": "default"},
                "spec": {"replicatedJobs": []}}),
            (CLUSTER_RUNTIMES.path(), {
                "apiVersion": CLUSTER_RUNTIMES.api_version, "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "harness-webhook-probe"},
                "spec": {"mlPolicy": {"numNodes": 1},
                         "template": {"spec": {"replicatedJobs": []}}}}),
        ]
        for path, body in probes:
            while True:
                try:
                    await client.request("POST", path, body=body, query=[("dryRun", "All")],
                                         verb="create")
                    break
                except Exception as error:
                    if status_of(error) in (400, 409, 422) and "webhook" not in str(error):
                        break  # the webhook answered (and may have refused the probe)
                    if time.monotonic() > deadline:
                        raise TrainerChainError(
                            f"{self.cluster.name}: webhook not answering ({error})") from error
                await asyncio.sleep(_POLL_SECONDS)

    async def stop(self) -> None:
        """Unhook the webhooks from the API server (if it runs), then end every process."""
        if self.cluster.apiserver.running():
            try:
                client = await admin_client(self.cluster, timeout=5.0)
                try:
                    for server in (self.jobset, self.trainer):
                        for kind, body in server.configurations(self.ca_bundle):
                            await Resource(client, kind).delete(body["metadata"]["name"])
                finally:
                    await client.close()
            except Exception as error:  # the cluster may be going away too
                log.warning("%s: could not remove the chain's webhooks: %s",
                            self.cluster.name, error)
        for process in reversed(self.processes):
            process.stop()

    def kill(self) -> None:
        for process in self.processes:
            process.kill()


def chain_crd_files(*, kueue: bool = False, kueue_served: str | None = None) -> list[Path]:
    """The CRDs of a local cluster that runs the real chain: the dispatcher's own, the
    Trainer's and JobSet's as their modules ship them (and Kueue's, with `kueue`; serving
    only the version `kueue_served`, when given)."""
    from devkit.localcluster.binaries import ensure_kueue

    files = ensure_trainer_chain()
    crds = (sorted(CRD_DIR.glob("dispatcher.trainjob.io_*.yaml")) + files.trainer_crds()
            + files.jobset_crds() + files.kwok_crds())
    return crds + ensure_kueue().kueue_crds(served=kueue_served) if kueue else crds


def kwok_delays(*, run_seconds: float | None) -> dict[str, str]:
    """Pod annotations kwok reads its stage delays from: created and running at once,
    finished `run_seconds` after (with None: not before `end_pods` says so). kwok waits
    between `delay` and `jitter-delay`, so both are set."""
    run = RUNS_UNTIL_ENDED if run_seconds is None else f"{run_seconds:g}s"
    delays = {"pod-create": "0s", "pod-ready": "0s", "pod-complete": run}
    return {f"{stage}.stage.kwok.x-k8s.io/{knob}": delay
            for stage, delay in delays.items() for knob in ("delay", "jitter-delay")}


def _failing() -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations that make a running pod's container fail a moment later."""
    return ({POD_FAILS_LABEL: "true"},
            {"pod-complete.stage.kwok.x-k8s.io/weight": "0",
             f"{POD_FAILS_LABEL}/delay": "1s", f"{POD_FAILS_LABEL}/jitter-delay": "1s"})


def kwok_timed(runtime: JSON, *, run_seconds: float | None) -> JSON:
    """`runtime` with its pods timed by `kwok_delays`."""
    import copy

    body = copy.deepcopy(runtime)
    for replicated in body["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = replicated["template"]["spec"]["template"]
        pod.setdefault("metadata", {}).setdefault("annotations", {}).update(
            kwok_delays(run_seconds=run_seconds))
    return body


def kwok_patch(*, run_seconds: float | None = None, fails: bool = False,
               replicated_jobs: tuple[str, ...] = ("node",)) -> JSON:
    """An entry of a TrainJob's `spec.runtimePatches` that times its own pods under kwok
    (see `kwok_delays`), whatever its runtime says; with `fails`, each pod's container
    fails a second after it runs. The patch reaches the pods through the Trainer itself,
    so a mirror carries it to whichever worker runs the job."""
    metadata: JSON = {"annotations": kwok_delays(run_seconds=run_seconds)}
    if fails:
        labels, annotations = _failing()
        metadata = {"labels": labels, "annotations": {**metadata["annotations"],
                                                      **annotations}}
    return {"manager": KWOK_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": name, "template": {"spec": {"template": {
            "metadata": metadata}}}} for name in replicated_jobs]}}}}


async def end_pods(client: ClusterClient, namespace: str, job: str, *,
                   fail: bool = False) -> int:
    """End the pods of TrainJob `job` now, as their containers exiting would, once every
    one of them runs: kwok moves each to Succeeded (or, with `fail`, its container to a
    failure); the Job, JobSet and Trainer controllers then write what follows. Returns
    how many it ended (none while some are not running yet). Pods being deleted (of an
    earlier copy of the job, withdrawn) are not the job's: they are left alone."""
    pods = Resource(client, PODS)
    listed = await pods.list(namespace=namespace,
                             label_selector=f"{JOBSET_NAME_LABEL}={job}")
    current = [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]
    running = [p for p in current if p["status"].get("phase") == "Running"]
    if len(running) < len(current):
        return 0
    if fail:
        labels, annotations = _failing()
        annotations = {**annotations, f"{POD_FAILS_LABEL}/delay": "0s",
                       f"{POD_FAILS_LABEL}/jitter-delay": "0s"}
        patch: JSON = {"metadata": {"labels": labels, "annotations": annotations}}
    else:
        patch = {"metadata": {"annotations": {
            "pod-complete.stage.kwok.x-k8s.io/delay": "0s",
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "0s"}}}
    for pod in running:
        await pods.merge_patch(pod["metadata"]["name"], patch, namespace=namespace)
    return len(running)


async def pods_by_node(client: ClusterClient, namespace: str) -> list[tuple[str, str, str]]:
    """(pod, node, phase) of every pod in `namespace`: where a worker's scheduler put them."""
    pods = (await Resource(client, PODS).list(namespace=namespace))["items"]
    return sorted((p["metadata"]["name"], p["spec"].get("nodeName") or "-",
                   p["status"].get("phase", "")) for p in pods)
