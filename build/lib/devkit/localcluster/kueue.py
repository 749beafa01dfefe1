"""Real Kueue on a local cluster: its namespace, certificates, webhooks and process.

`KueueManager(cluster, settings=...)` prepares one Kueue manager for one `ServedCluster`:
a configuration file, a webhook serving certificate for 127.0.0.1 signed by the
cluster's own CA, and a `ManagedProcess` running the binary that `controlplane/build.sh`
built. `await start()` creates the `kueue-system` namespace, starts the process, waits
for its `/readyz`, then points Kueue's webhook configurations (only the entries for
Kueue's own kinds and TrainJobs) and the conversion webhooks of its multi-version CRDs
at the local server (`url` + `caBundle`, as envtest does), and returns once an
admission request through the webhook succeeds. `await stop()` removes those
configurations (so the cluster keeps working without Kueue) and ends the process;
`kill()` ends it at once. The cluster should run the garbage collector: Workloads are
owned by their jobs and only the collector frees their quota when a job is deleted.
`KueueSettings(feature_gates=...)` turns on more of Kueue's feature gates (the
visibility API is always off).

Kueue reads metrics serving certificates from a fixed path when its internal certificate
management is off (as here, so that the webhook certificate can be our own); a
self-signed pair is written there once when missing.

MultiKueue's clients for the worker clusters use client-go's fixed 5 QPS / 10 burst in
Kueue v0.17. `MultiKueueSettings(remote_qps=..., remote_burst=...)` runs instead the
`kueue-remote-qps` binary that `controlplane/build.sh kueue-remote-qps` builds (built on
first use): the same Kueue, its remote clients' limit taken from the environment.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devkit.localcluster.access import admin_client, free_port
from devkit.localcluster.binaries import BinariesNotFound, KueueFiles, ensure_kueue
from devkit.localcluster.pki import sign_server_certificate
from devkit.localcluster.processes import ManagedProcess, wait_healthy
from devkit.localcluster.webhooks import pointed_at
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import CRDS, NAMESPACES, Resource, ResourceKind, status_of

if TYPE_CHECKING:
    from devkit.localcluster.access import ServedCluster

log = logging.getLogger(__name__)
JSON = dict[str, Any]

KUEUE_NAMESPACE = "kueue-system"
TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"
# Webhook entries kept from Kueue's manifests: its own kinds and the one integration on.
WEBHOOK_GROUPS = frozenset({"kueue.x-k8s.io", "trainer.kubeflow.org"})
# CRDs that Kueue's kustomization gives a conversion webhook (v1beta1 <-> v1beta2).
CONVERTED_CRDS = (
    "clusterqueues.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io", "workloads.kueue.x-k8s.io",
)
CONVERSION_PATH = "/convert"
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# The visibility API server needs certificates at a fixed path; the harness does not use it.
FEATURE_GATES = "VisibilityOnDemand=false"
RESOURCE_FLAVORS_V1BETA2 = ResourceKind("kueue.x-k8s.io", "v1beta2", "resourceflavors",
                                        namespaced=False)
READY_TIMEOUT_SECONDS = 60.0
REMOTE_QPS_BINARY = "kueue-remote-qps"
REMOTE_QPS_ENV = "KUEUE_MULTIKUEUE_REMOTE_QPS"
REMOTE_BURST_ENV = "KUEUE_MULTIKUEUE_REMOTE_BURST"
_BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "controlplane" / "build.sh"
_FIELD_MANAGER = "trainjob-dispatcher-localcluster"
_POLL_SECONDS = 0.1


class KueueError(RuntimeError):
    """Kueue did not start, or its webhooks did not answer."""


@dataclass(frozen=True)
class MultiKueueSettings:
    """The manager-side MultiKueue knobs (`multiKueue` in Kueue's configuration)."""

    dispatcher_name: str = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
    gc_interval: str = "1m"
    worker_lost_timeout: str = "15m"
    origin: str = "multikueue"
    remote_qps: float | None = None
    """Rate limit of the clients for worker clusters (client-go's 5 when None); any
    value runs the rebuilt `kueue-remote-qps` binary."""
    remote_burst: int | None = None


@dataclass(frozen=True)
class KueueSettings:
    """What a harness may tune; the defaults are Kueue's own (qps 20, burst 30)."""

    qps: float = 20.0
    burst: int = 30
    # Concurrent reconciles per kind, e.g. {"Workload.kueue.x-k8s.io": 10}; empty = defaults.
    concurrency: dict[str, int] = field(default_factory=dict)
    multikueue: MultiKueueSettings | None = None
    log_level: str = "info"  # zap: debug, info, error, or an integer > 0 (more verbose)
    feature_gates: tuple[str, ...] = ()
    """Feature gates beside FEATURE_GATES, as `Name=true` (e.g.
    `MultiKueueOrchestratedPreemption=true`)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def configuration(*, ports: dict[str, int], cert_dir: Path, settings: KueueSettings) -> JSON:
    """Kueue's `Configuration` (config.kueue.x-k8s.io/v1beta2) for one local manager."""
    config: JSON = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": str(cert_dir)},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": settings.qps, "burst": settings.burst},
        "integrations": {"frameworks": [TRAINJOB_FRAMEWORK]},
    }
    if settings.concurrency:
        config["controller"] = {"groupKindConcurrency": dict(settings.concurrency)}
    if settings.multikueue is not None:
        mk = settings.multikueue
        config["multiKueue"] = {
            "gcInterval": mk.gc_interval, "origin": mk.origin,
            "workerLostTimeout": mk.worker_lost_timeout, "dispatcherName": mk.dispatcher_name,
        }
    return config


def feature_gates(settings: KueueSettings) -> str:
    """The value of Kueue's `--feature-gates`: FEATURE_GATES and the settings' own."""
    return ",".join((FEATURE_GATES, *settings.feature_gates))


def _kept(webhook: JSON) -> bool:
    groups = {g for rule in webhook.get("rules") or [] for g in rule.get("apiGroups") or []}
    return bool(groups) and groups <= WEBHOOK_GROUPS


def webhook_configurations(manifests: list[JSON], *, base_url: str, ca_bundle: str
                           ) -> list[tuple[ResourceKind, JSON]]:
    """Kueue's webhook configurations, reduced to the kept entries and pointed at
    `base_url` (the local webhook server) instead of an in-cluster Service."""
    return pointed_at(manifests, prefix="kueue", base_url=base_url, ca_bundle=ca_bundle,
                      keep=_kept)


def _conversion(*, base_url: str, ca_bundle: str) -> JSON:
    return {"spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "clientConfig": {"url": f"{base_url}{CONVERSION_PATH}", "caBundle": ca_bundle},
        "conversionReviewVersions": ["v1"]}}}}


async def _converted(crds: Resource) -> list[str]:
    """Those of `CONVERTED_CRDS` installed with more than one version (none when the
    cluster's Kueue CRDs serve v1beta2 only)."""
    names = []
    for name in CONVERTED_CRDS:
        crd = await crds.get(name)
        if crd is not None and len(crd["spec"]["versions"]) > 1:
            names.append(name)
    return names


_NO_CONVERSION: JSON = {"spec": {"conversion": {"strategy": "None", "webhook": None}}}


def ensure_remote_qps_binary(files: KueueFiles) -> Path:
    """The `kueue-remote-qps` binary beside `files.binary`, built when missing."""
    binary = files.directory / REMOTE_QPS_BINARY
    if not binary.exists():
        if not _BUILD_SCRIPT.exists():
            raise BinariesNotFound(f"{binary} missing and {_BUILD_SCRIPT} not found")
        subprocess.run(["bash", str(_BUILD_SCRIPT), REMOTE_QPS_BINARY], check=True,
                       stdout=subprocess.DEVNULL)
    return binary


def ensure_metrics_certificates(cluster: ServedCluster, directory: Path = METRICS_CERT_DIR
                                ) -> None:
    """Write a metrics serving pair where Kueue insists on finding one, once."""
    if (directory / "tls.crt").exists() and (directory / "tls.key").exists():
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except PermissionError as error:
        raise KueueError(f"Kueue needs {directory}/tls.{{crt,key}}; cannot create them: "
                         f"{error}") from error
    cert, key = sign_server_certificate(cluster.certs, common_name="kueue-metrics")
    (directory / "tls.key").write_bytes(key)
    (directory / "tls.crt").write_bytes(cert)


class KueueManager:
    """One Kueue manager process serving one local cluster."""

    def __init__(self, cluster: ServedCluster, *, settings: KueueSettings | None = None,
                 files: KueueFiles | None = None) -> None:
        self.cluster = cluster
        self.settings = settings or KueueSettings()
        self.files = files or ensure_kueue()
        self.directory = cluster.directory / "kueue"
        self.ports = {"health": free_port(), "metrics": free_port(), "webhook": free_port()}
        self.base_url = f"https://127.0.0.1:{self.ports['webhook']}"
        self.ca_bundle = _b64(cluster.certs.ca_cert.read_bytes())
        cert_dir = self.directory / "webhook-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        cert, key = sign_server_certificate(cluster.certs, common_name="kueue-webhook")
        (cert_dir / "tls.key").write_bytes(key)
        (cert_dir / "tls.crt").write_bytes(cert)
        config_path = self.directory / "config.yaml"
        config_path.write_text(yaml.safe_dump(
            configuration(ports=self.ports, cert_dir=cert_dir, settings=self.settings)))
        binary, env = self.files.binary, {"KUBECONFIG": str(cluster.kubeconfig_path)}
        mk = self.settings.multikueue
        if mk is not None and (mk.remote_qps is not None or mk.remote_burst is not None):
            binary = ensure_remote_qps_binary(self.files)
            if mk.remote_qps is not None:
                env[REMOTE_QPS_ENV] = str(mk.remote_qps)
            if mk.remote_burst is not None:
                env[REMOTE_BURST_ENV] = str(mk.remote_burst)
        self.process = ManagedProcess(
            name=f"{cluster.name}/kueue",
            argv=[str(binary), f"--config={config_path}",
                  f"--feature-gates={feature_gates(self.settings)}",
                  f"--zap-log-level={self.settings.log_level}"],
            log_path=cluster.directory / "kueue.log",
            env=env,
        )

    async def start(self, *, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Start Kueue and return once its webhooks answer admission requests."""
        ensure_metrics_certificates(self.cluster)
        client = await admin_client(self.cluster)
        try:
            await _ensure_namespace(client, KUEUE_NAMESPACE)
            self.process.start()
            deadline = time.monotonic() + timeout
            await self._wait_ready(deadline)
            await self._install_webhooks(client)
            await self._wait_admission(client, deadline)
        finally:
            await client.close()
        log.info("%s: Kueue ready (webhook %s)", self.cluster.name, self.base_url)

    async def _wait_ready(self, deadline: float) -> None:
        await wait_healthy(self.process, f"http://127.0.0.1:{self.ports['health']}/readyz",
                           deadline=deadline, error=KueueError, poll_seconds=_POLL_SECONDS)

    async def _install_webhooks(self, client: ClusterClient) -> None:
        manifests = [d for d in yaml.safe_load_all(self.files.webhooks.read_text()) if d]
        for kind, body in webhook_configurations(manifests, base_url=self.base_url,
                                                 ca_bundle=self.ca_bundle):
            await Resource(client, kind).apply(body, field_manager=_FIELD_MANAGER)
        crds = Resource(client, CRDS)
        patch = _conversion(base_url=self.base_url, ca_bundle=self.ca_bundle)
        for name in await _converted(crds):
            await crds.merge_patch(name, patch)

    async def _wait_admission(self, client: ClusterClient, deadline: float) -> None:
        """A dry-run create through the ResourceFlavor webhooks: Kueue's objects can be
        created from here on (its webhooks reject requests while it cannot serve)."""
        probe = {"apiVersion": RESOURCE_FLAVORS_V1BETA2.api_version, "kind": "ResourceFlavor",
                 "metadata": {"name": "harness-webhook-probe"}}
        path = RESOURCE_FLAVORS_V1BETA2.path()
        while True:
            try:
                await client.request("POST", path, body=probe, query=[("dryRun", "All")],
                                     verb="create")
                return
            except Exception as error:
                if status_of(error) == 409:
                    return
                if time.monotonic() > deadline or not self.process.running():
                    raise KueueError(f"{self.process.name}: webhook not answering ({error}):\n"
                                     f"{self.process.tail()}") from error
            await asyncio.sleep(_POLL_SECONDS)

    async def _uninstall_webhooks(self) -> None:
        client = await admin_client(self.cluster, timeout=5.0)
        try:
            manifests = [d for d in yaml.safe_load_all(self.files.webhooks.read_text()) if d]
            for kind, body in webhook_configurations(manifests, base_url=self.base_url,
                                                     ca_bundle=self.ca_bundle):
                await Resource(client, kind).delete(body["metadata"]["name"])
            crds = Resource(client, CRDS)
            for name in await _converted(crds):
                await crds.merge_patch(name, _NO_CONVERSION)
        finally:
            await client.close()

    async def stop(self) -> None:
        """Unhook Kueue from the cluster's API server, then end the process."""
        if self.cluster.apiserver.running():
            try:
                await self._uninstall_webhooks()
            except Exception as error:  # the cluster may be going away too
                log.warning("%s: could not remove Kueue's webhooks: %s", self.cluster.name,
                            error)
        self.process.stop()

    def kill(self) -> None:
        self.process.kill()


async def _ensure_namespace(client: ClusterClient, name: str) -> None:
    try:
        await Resource(client, NAMESPACES).create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except Exception as error:
        if status_of(error) != 409:
            raise
