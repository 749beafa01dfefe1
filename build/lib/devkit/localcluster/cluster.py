"""A real local Kubernetes control plane: one etcd and N named API servers on 127.0.0.1.

`LocalControlPlane.start(names)` launches one etcd shared by every cluster (each API
server has its own `--etcd-prefix`, so the clusters share nothing but the process; a
cluster started with `own_etcd` has one to itself, `etcd.py`),
one kube-apiserver per name with TLS and an admin client certificate, and optionally a
kube-controller-manager running only the garbage-collector and namespace controllers.
It writes one self-contained kubeconfig per cluster, waits for `/readyz`, and installs
the CRDs: those of `config/crd/` (Trainer, WorkerCluster) and the real Kueue and JobSet
CRDs from Kueue's Go module (see `binaries.py`). `LocalCluster.start_kueue()` runs a
real Kueue manager on a cluster (`kueue.py`). `stop()` ends every process, Kueue before
the API servers; children also die with the Python process. A `LocalCluster` can be
paused (SIGSTOP), resumed, killed and restarted with its data kept in etcd, for fault
tests.

Nodes and pods come with the real Trainer chain (`LocalCluster.start_trainer`, kwok nodes);
without it nothing runs pods.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from devkit.localcluster.access import CRD_DIR, admin_client, free_port
from devkit.localcluster.binaries import ensure_binaries, ensure_kueue
from devkit.localcluster.crds import install_crds
from devkit.localcluster.etcd import Etcd
from devkit.localcluster.kueue import KueueManager, KueueSettings
from devkit.localcluster.pki import CertificateFiles, ensure_certificates
from devkit.localcluster.processes import ManagedProcess
from devkit.localcluster.trainer import NodePool, TrainerChain, TrainerChainError
from dispatcher.admin import ensure_namespace

log = logging.getLogger(__name__)

_CONTROLLERS = "garbage-collector-controller,namespace-controller,job-controller"
_PORT_ATTEMPTS = 3
DISPATCHER_NAMESPACE = "trainjob-dispatcher"
"""The dispatcher's default namespace (its Placement records live there), which
`deploy/` creates: every local cluster has it, as a deployed manager would."""


LEAN_APISERVER_FLAGS = [
    # Only the API groups a worker's mirrors need: core, CRDs, RBAC, the API server's own
    # leases, authorization reviews and events; no apps, batch, networking, ...
    "--runtime-config=apps/v1=false,batch/v1=false,autoscaling/v1=false,"
    "autoscaling/v2=false,policy/v1=false,certificates.k8s.io/v1=false,"
    "resource.k8s.io/v1=false,storagemigration.k8s.io/v1beta1=false",
    "--watch-cache=false",  # watches and lists read etcd: no copy of every object
    "--max-requests-inflight=100", "--max-mutating-requests-inflight=50",
    "--profiling=false",
]
"""A worker that only holds mirrors: `bench fleet` runs 50 of these beside each other."""
LEAN_APISERVER_ENV = {"GOGC": "50"}
"""Go's collector runs when the heap grows by half, not when it doubles. No GOMEMLIMIT:
at 128 MiB (below a lean API server's ~200 MiB live set) the collector ran without
pause, and 500 TrainJob creates with 1,000 status patches cost one API server 6.9 s of
CPU against 3.4 s with GOGC=50 alone (2.9 s with Go's defaults, at 314 MiB instead of
253 MiB): in the 10-worker fleet run, half the workers' API servers burnt 30 s each."""


class ControlPlaneError(RuntimeError):
    """A process of the local control plane failed to start or become ready."""



def _advertise_address() -> str | None:
    """A non-loopback local address when the host has no default route, else None.

    kube-apiserver picks its advertised address from the default route; without one it
    fails to start unless told. A loopback address is refused.
    """
    routes = subprocess.run(["ip", "-4", "route", "show", "default"], capture_output=True,
                            text=True, check=False)
    if routes.stdout.strip():
        return None
    addresses = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False)
    for address in addresses.stdout.split():
        if "." in address and not address.startswith("127."):
            return address
    return "10.255.255.1"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def default_crd_files() -> list[Path]:
    """The project's CRDs plus Kueue's and JobSet's, as their Go modules ship them."""
    kueue = ensure_kueue()
    return sorted(CRD_DIR.glob("*.yaml")) + kueue.kueue_crds() + kueue.jobset_crds()


async def create_namespace(cluster: LocalCluster, name: str) -> None:

    client = await admin_client(cluster)
    try:
        await ensure_namespace(client, name)
    finally:
        await client.close()


class LocalCluster:
    """One API server (and optionally its controller manager) over the shared etcd."""

    def __init__(
        self,
        *,
        name: str,
        directory: Path,
        binaries: Path,
        etcd_url: str,
        controllers: bool,
        lean: bool = False,
    ) -> None:
        self.name = name
        self.directory = directory
        self.binaries = binaries
        self.port = free_port()
        self.certs: CertificateFiles = ensure_certificates(directory / "pki")
        self.kubeconfig_path = directory / "kubeconfig.yaml"
        self.kubeconfig_path.write_text(yaml.safe_dump(self.kubeconfig()))
        argv = [
            str(binaries / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--etcd-prefix=/clusters/{name}",
            f"--cert-dir={directory / 'pki'}",
            f"--tls-cert-file={self.certs.serving_cert}",
            f"--tls-private-key-file={self.certs.serving_key}",
            f"--client-ca-file={self.certs.ca_cert}",
            f"--secure-port={self.port}",
            "--bind-address=127.0.0.1",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={self.certs.service_account_pub}",
            f"--service-account-signing-key-file={self.certs.service_account_key}",
            "--kubelet-preferred-address-types=InternalIP",  # kwok's nodes: 127.0.0.1
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            "--v=0",
        ]
        advertise = _advertise_address()
        if advertise:
            argv.append(f"--advertise-address={advertise}")
        if lean:
            argv += LEAN_APISERVER_FLAGS
        self.lean = lean
        self.apiserver = ManagedProcess(
            name=f"{name}/kube-apiserver", argv=argv, log_path=directory / "kube-apiserver.log",
            env=LEAN_APISERVER_ENV if lean else None)
        self.kueue: KueueManager | None = None
        self.trainer: TrainerChain | None = None
        self.controller_manager: ManagedProcess | None = None
        if controllers:
            self.controller_manager = ManagedProcess(
                name=f"{name}/kube-controller-manager",
                argv=[
                    str(binaries / "kube-controller-manager"),
                    f"--kubeconfig={self.kubeconfig_path}",
                    f"--controllers={_CONTROLLERS}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--concurrent-gc-syncs=5",
                    "--v=0",
                ],
                log_path=directory / "kube-controller-manager.log",
            )

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, *, user: str = "admin", cert: bytes | None = None,
                   key: bytes | None = None) -> dict[str, Any]:
        """A kubeconfig with every credential inline (no file references)."""
        cert_data = base64.b64encode(cert).decode() if cert else _b64(self.certs.admin_cert)
        key_data = base64.b64encode(key).decode() if key else _b64(self.certs.admin_key)
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": {
                "server": self.url,
                "certificate-authority-data": _b64(self.certs.ca_cert),
            }}],
            "users": [{"name": user, "user": {
                "client-certificate-data": cert_data,
                "client-key-data": key_data,
            }}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": user}}],
            "current-context": self.name,
        }

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.certs.ca_cert))
        context.load_cert_chain(str(self.certs.admin_cert), str(self.certs.admin_key))
        return context

    async def wait_ready(self, *, timeout: float = 60.0) -> None:
        """Poll `/readyz` until it answers 200; fail early if the process died."""
        deadline = time.monotonic() + timeout
        context = self._ssl_context()
        async with aiohttp.ClientSession() as session:
            while True:
                if not self.apiserver.running():
                    raise ControlPlaneError(
                        f"{self.name}: kube-apiserver exited:\n{self.apiserver.tail()}"
                    )
                try:
                    async with session.get(
                        f"{self.url}/readyz", ssl=context, timeout=aiohttp.ClientTimeout(total=2)
                    ) as response:
                        if response.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise ControlPlaneError(
                        f"{self.name}: not ready after {timeout}s:\n{self.apiserver.tail()}"
                    )
                await asyncio.sleep(0.2)

    def start_processes(self) -> None:
        self.apiserver.start()
        if self.controller_manager:
            self.controller_manager.start()

    async def start(self) -> None:
        self.start_processes()
        await self.wait_ready()

    def pause(self) -> None:
        """Freeze the API server: connections hang, as with a lost network."""
        self.apiserver.freeze()

    def resume(self) -> None:
        self.apiserver.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the API server and controller manager; the data stays in etcd."""
        if self.controller_manager:
            self.controller_manager.kill()
        self.apiserver.kill()

    async def restart(self) -> None:
        """Start again on the same port with the same certificates and data."""
        self.kill()
        await self.start()

    async def start_kueue(self, settings: KueueSettings | None = None) -> KueueManager:
        """Run a real Kueue manager on this cluster; ready when this returns."""
        if self.kueue is not None:
            raise ControlPlaneError(f"{self.name}: Kueue already runs")
        if self.controller_manager is None:
            raise ControlPlaneError(
                f"{self.name}: Kueue needs the garbage collector (start with controllers)")
        self.kueue = KueueManager(self, settings=settings)
        try:
            await self.kueue.start()
        except BaseException:
            self.kueue.kill()
            self.kueue = None
            raise
        return self.kueue

    async def start_trainer(self, nodes: NodePool | None = None) -> TrainerChain:
        """Run the real Trainer and JobSet (and with `nodes`, kube-scheduler and kwok with
        that many fake nodes); ready when this returns."""
        if self.trainer is not None:
            raise ControlPlaneError(f"{self.name}: the Trainer already runs")
        if self.controller_manager is None:
            raise ControlPlaneError(
                f"{self.name}: the Trainer chain needs the Job controller (start with "
                "controllers)")
        for attempt in range(_PORT_ATTEMPTS):
            chain = TrainerChain(self, nodes=nodes)  # fresh ports each time
            try:
                await chain.start()
            except TrainerChainError as error:
                # A free port picked for it can be taken by another process starting
                # at the same moment before it binds.
                if "address already in use" not in str(error) or attempt + 1 == _PORT_ATTEMPTS:
                    raise
                log.info("%s: a port of the Trainer chain was taken; starting it again",
                         self.name)
                continue
            self.trainer = chain
            return chain
        raise AssertionError("unreachable")

    async def stop_trainer(self) -> None:
        if self.trainer is not None:
            await self.trainer.stop()
            self.trainer = None

    async def stop_kueue(self) -> None:
        """Unhook and end Kueue; the cluster goes on without it."""
        if self.kueue is not None:
            await self.kueue.stop()
            self.kueue = None

    def stop(self) -> None:
        if self.kueue is not None:
            self.kueue.process.stop()
            self.kueue = None
        if self.trainer is not None:
            for process in reversed(self.trainer.processes):
                process.stop()
            self.trainer = None
        if self.controller_manager:
            self.controller_manager.stop()
        self.apiserver.stop()

    def processes(self) -> list[ManagedProcess]:
        kueue = self.kueue.process if self.kueue is not None else None
        chain = self.trainer.processes if self.trainer is not None else []
        return [p for p in (self.apiserver, self.controller_manager, kueue, *chain)
                if p is not None]


class LocalControlPlane:
    """One etcd plus named `LocalCluster`s; use as an async context manager."""

    def __init__(self, *, directory: Path | None = None, keep_directory: bool = False) -> None:
        self._owns_directory = directory is None and not keep_directory
        self.directory = directory or Path(tempfile.mkdtemp(prefix="trainjob-dispatcher-"))
        self.binaries = ensure_binaries()
        self.clusters: dict[str, LocalCluster] = {}
        self.etcd = Etcd(binaries=self.binaries, directory=self.directory)
        self.own_etcds: dict[str, Etcd] = {}
        """The clusters started with an etcd of their own (`start(own_etcd=...)`)."""

    async def __aenter__(self) -> LocalControlPlane:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    async def start(
        self,
        names: Iterable[str],
        *,
        controllers: Iterable[str] = (),
        crd_files: Iterable[Path] | None = None,
        lean: Iterable[str] = (),
        own_etcd: Iterable[str] = (),
        ready_timeout: float = 60.0,
    ) -> dict[str, LocalCluster]:
        """Start etcd (once) and one API server per name, ready and with CRDs installed.

        `controllers` names the clusters that also run kube-controller-manager; `lean`
        those whose API server serves only what mirrors need (`LEAN_APISERVER_FLAGS`);
        `own_etcd` those that keep their data in an etcd of their own, not the shared one.
        """
        with_controllers, lean_names = set(controllers), set(lean)
        names = list(names)
        for name in own_etcd:
            self.own_etcds[name] = Etcd(binaries=self.binaries, directory=self.directory,
                                        name=f"etcd-{name}")
            await self.own_etcds[name].start()
        if any(name not in self.own_etcds for name in names):
            await self.etcd.start()
        new = [
            LocalCluster(
                name=name,
                directory=self.directory / name,
                binaries=self.binaries,
                etcd_url=self.own_etcds.get(name, self.etcd).url,
                controllers=name in with_controllers,
                lean=name in lean_names,
            )
            for name in names
        ]
        for cluster in new:
            self.clusters[cluster.name] = cluster
            cluster.start_processes()
        await asyncio.gather(*(cluster.wait_ready(timeout=ready_timeout) for cluster in new))
        files = list(crd_files) if crd_files is not None else default_crd_files()
        await asyncio.gather(*(install_crds(cluster, files) for cluster in new))
        await asyncio.gather(*(create_namespace(cluster, DISPATCHER_NAMESPACE)
                               for cluster in new))
        return {cluster.name: cluster for cluster in new}

    def processes(self) -> list[ManagedProcess]:
        return [p for c in self.clusters.values() for p in c.processes()] + [
            etcd.process for etcd in (self.etcd, *self.own_etcds.values())]

    def stop(self) -> None:
        for cluster in self.clusters.values():  # every Kueue first: then no reconnect noise
            if cluster.kueue is not None:
                cluster.kueue.process.stop()
                cluster.kueue = None
        for cluster in self.clusters.values():
            cluster.stop()
        for etcd in (self.etcd, *self.own_etcds.values()):
            etcd.stop()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
