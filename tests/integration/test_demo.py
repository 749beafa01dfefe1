"""`dispatcher demo` as the README runs it (`make demo`), at its smallest: the sample jobs
finish, and the lines saying where their pods ran name the workers' kwok nodes.

The demo starts clusters of its own (a manager and two workers with the whole Trainer
chain), so this test costs what the demo costs: about a minute on 2 cores.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.localcluster.binaries import ensure_binaries, ensure_trainer_chain
from devkit.localenv import WORKER_NODES
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
_WHERE = "where the pods ran"
_POD_LINE = re.compile(r"^  (\S+)\s+(\S+)\s+(\S+)\s+(\S+)$")


def _claimed_samples() -> list[dict[str, Any]]:
    docs = yaml.safe_load_all((REPO / "config" / "samples" / "trainjobs.yaml").read_text())
    return [d for d in docs if d and d["spec"].get("managedBy") == MANAGED_BY_MULTIKUEUE]


def test_the_demo_runs_the_samples_and_shows_the_kwok_nodes_their_pods_ran_on() -> None:
    ensure_binaries()
    ensure_trainer_chain()
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "dispatcher", "demo", "--port", "0", "--jobs-seconds", "1"],
        capture_output=True, text=True, timeout=300, cwd=REPO, check=False,
        env={**os.environ, "COLUMNS": "200"})  # rich wraps at 80 columns without a tty
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    print(f"demo took {time.monotonic() - started:.0f}s")
    lines = output.splitlines()
    after = lines[next(i for i, line in enumerate(lines) if line.startswith(_WHERE)) + 1:]
    rows = [m.groups() for m in map(_POD_LINE.match, after) if m]
    assert rows, output
    for worker, pod, node, phase in rows:
        assert worker in WORKER_NODES, (worker, pod)
        assert re.fullmatch(rf"{worker}-node-\d+", node), (worker, pod, node)
        assert int(node.rsplit("-", 1)[1]) < WORKER_NODES[worker].count
        assert phase in ("Running", "Succeeded"), (pod, phase)
    for sample in _claimed_samples():  # every pod of every claimed job was seen placed
        name = sample["metadata"]["name"]
        pods = [pod for _, pod, _, _ in rows if pod.startswith(f"{name}-")]
        assert len(pods) == sample["spec"]["trainer"]["numNodes"], (name, rows)
    # 4 CPU a pod on nodes of 4 CPU: each of llama-finetune's 4 pods has a node of its own.
    llama = {(worker, node) for worker, pod, node, _ in rows
             if pod.startswith("llama-finetune-")}
    assert len(llama) == 4, llama
