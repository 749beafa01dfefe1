"""Where the control-plane binaries are, building them from the Go module proxy if needed.

`controlplane/build.sh` in the repository compiles etcd, kube-apiserver and
kube-controller-manager once per Kubernetes version into
`~/.cache/trainjob-dispatcher/controlplane/<version>/`; later calls find them there.
`TRAINJOB_DISPATCHER_CONTROLPLANE_BIN` points at another directory holding the three.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
_BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "controlplane" / "build.sh"


class BinariesNotFound(RuntimeError):
    """The binaries are neither cached nor buildable from this checkout."""


def _complete(directory: Path) -> bool:
    return all(os.access(directory / b, os.X_OK) for b in BINARIES)


def ensure_binaries() -> Path:
    """Return the directory with the three binaries, building them when missing."""
    override = os.environ.get("TRAINJOB_DISPATCHER_CONTROLPLANE_BIN")
    if override:
        directory = Path(override)
        if not _complete(directory):
            raise BinariesNotFound(f"{directory} lacks one of {', '.join(BINARIES)}")
        return directory
    if not _BUILD_SCRIPT.exists():
        raise BinariesNotFound(
            f"{_BUILD_SCRIPT} not found: set TRAINJOB_DISPATCHER_CONTROLPLANE_BIN"
        )
    result = subprocess.run(
        ["bash", str(_BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True
    )
    directory = Path(result.stdout.strip().splitlines()[-1])
    if not _complete(directory):
        raise BinariesNotFound(f"build finished but {directory} is incomplete")
    return directory
