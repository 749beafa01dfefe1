"""The Trainer chain's processes on a local cluster die with the harness that started
them, even when it is killed: no Trainer, JobSet, kube-scheduler or kwok is left behind."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.integration.conftest import eventually
from tests.integration.kueue.test_kueue_process import _alive

pytestmark = pytest.mark.integration

_CHILD = textwrap.dedent("""
    import asyncio, json, pathlib, sys, time
    from devkit.localcluster import LocalControlPlane
    from devkit.localcluster.trainer import NodePool, chain_crd_files

    async def main() -> None:
        plane = LocalControlPlane(directory=pathlib.Path(sys.argv[1]))
        await plane.start(["solo"], controllers=["solo"], crd_files=chain_crd_files())
        await plane.clusters["solo"].start_trainer(NodePool(count=1))
        print(json.dumps([p.pid for p in plane.processes()]), flush=True)
        time.sleep(600)

    asyncio.run(main())
""")
CHAIN = {"trainer-controller-manager", "jobset", "kube-scheduler", "kwok"}


def _program(pid: int) -> str:
    return Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()).name


async def test_a_killed_harness_leaves_no_trainer_chain_behind(tmp_path: Path) -> None:
    child = subprocess.Popen(  # noqa: ASYNC220 - one child, read once
        [sys.executable, "-c", _CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline),  # type: ignore[union-attr]
                                      timeout=180)
        pids = json.loads(line)
        assert all(_alive(p) for p in pids)
        programs = {_program(p) for p in pids}
        assert programs >= CHAIN, programs
        assert {"kube-apiserver", "etcd"} <= programs, programs
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()

    async def all_gone() -> bool:
        return not any(_alive(p) for p in pids)
    await eventually(all_gone, timeout=10, interval=0.2)
