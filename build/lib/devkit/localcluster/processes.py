"""Child processes of the local control plane that never outlive the Python process.

Each child runs in its own session (so SIGSTOP of one API server touches nothing else)
and receives SIGKILL from the kernel when the Python process that started it dies
(`PR_SET_PDEATHSIG`), so a crashed test run leaves no orphan behind. Output goes to a
log file beside the cluster's data.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import aiohttp

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ManagedProcess:
    """One long-running binary: start, signal, stop, restart with the same arguments."""

    def __init__(self, *, name: str, argv: list[str], log_path: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = {**os.environ, **env} if env else None
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def start(self) -> None:
        if self.running():
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        log.debug("started %s (pid %s)", self.name, self._popen.pid)

    def signal(self, signum: signal.Signals) -> None:
        if self._popen is not None and self._popen.poll() is None:
            self._popen.send_signal(signum)

    def freeze(self, *, timeout_seconds: float = 5.0) -> None:
        """SIGSTOP, and return only once every thread of the process has stopped.

        The kernel stops a process's threads when one of them takes the signal, not when
        it is sent; until then a thread woken by a request may still answer it.
        """
        self.signal(signal.SIGSTOP)
        if self._popen is None:
            return
        deadline = time.monotonic() + timeout_seconds
        while not _all_threads_stopped(self._popen.pid):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} (pid {self._popen.pid}) did not stop")
            time.sleep(0.001)

    def kill(self) -> None:
        """SIGKILL and reap: the abrupt death a fault test wants."""
        if self._popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self._popen.send_signal(signal.SIGCONT)
            self._popen.kill()
        self._popen.wait()

    def stop(self, *, grace_seconds: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after the grace period; always reaps the child."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signal.SIGCONT)
                self._popen.terminate()
            try:
                self._popen.wait(timeout=grace_seconds)
            except subprocess.TimeoutExpired:
                self.kill()
        self._popen = None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def _all_threads_stopped(pid: int) -> bool:
    """True when every thread of `pid` is in the stopped state (or the process is gone)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return True
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:
            continue
        state = stat[stat.rindex(")") + 2]
        if state not in "TtZX":
            return False
    return True


async def wait_healthy(process: ManagedProcess, url: str, *, deadline: float,
                       error: type[Exception], poll_seconds: float = 0.1) -> None:
    """Until `url` (a controller's readiness endpoint) answers 200; `error` with the tail
    of the process's log when it exits first or `deadline` (monotonic) passes."""
    async with aiohttp.ClientSession() as session:
        while True:
            if not process.running():
                raise error(f"{process.name} exited:\n{process.tail()}")
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as answer:
                    if answer.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise error(f"{process.name} not ready:\n{process.tail()}")
            await asyncio.sleep(poll_seconds)
