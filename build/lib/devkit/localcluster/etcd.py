"""One local etcd for the control plane's API servers: started, checked healthy, stopped.

Every cluster of a `LocalControlPlane` keeps its data in an etcd under a prefix of its
own; most share one etcd, and a cluster can have one to itself (as a real management
cluster has), which `bench fleet` gives the manager so that fifty workers' writes do not
time out the manager's. Data is not synced to disk (`--unsafe-no-fsync`): these clusters
live for one run.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp

from devkit.localcluster.access import free_port
from devkit.localcluster.processes import ManagedProcess

QUOTA_BACKEND_BYTES = 8 * 1024**3


class EtcdError(RuntimeError):
    """etcd exited or did not become healthy."""


class Etcd:
    def __init__(self, *, binaries: Path, directory: Path, name: str = "etcd") -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.process = ManagedProcess(
            name=name,
            argv=[
                str(binaries / "etcd"),
                f"--data-dir={directory / name}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                "--listen-peer-urls=http://127.0.0.1:0",
                "--unsafe-no-fsync=true",
                f"--quota-backend-bytes={QUOTA_BACKEND_BYTES}",
                "--log-level=warn",
            ],
            log_path=directory / f"{name}.log",
        )

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def running(self) -> bool:
        return self.process.running()

    async def start(self, *, timeout: float = 30.0) -> None:
        """Start it (once) and wait until `/health` answers 200."""
        if self.running():
            return
        self.process.start()
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if not self.running():
                    raise EtcdError(f"{self.process.name} exited:\n{self.process.tail()}")
                try:
                    async with session.get(f"{self.url}/health") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise EtcdError(f"{self.process.name} not healthy after {timeout}s:\n"
                        f"{self.process.tail()}")

    def stop(self) -> None:
        self.process.stop()
