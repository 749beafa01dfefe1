"""Where the control-plane and Kueue binaries are, building them from the Go module proxy.

`controlplane/build.sh` in the repository compiles etcd, kube-apiserver and
kube-controller-manager once per Kubernetes version into
`~/.cache/trainjob-dispatcher/controlplane/<version>/`, and the Kueue manager once per
Kueue version into `~/.cache/trainjob-dispatcher/kueue/<version>/`, beside the YAML
its Go module ships (Kueue's CRDs, its webhook configurations, the JobSet CRD); later
calls find them there. `TRAINJOB_DISPATCHER_CONTROLPLANE_BIN` points at another
directory holding the three control-plane binaries, `TRAINJOB_DISPATCHER_KUEUE_DIR` at
another Kueue directory of the same layout. `build.sh trainer` builds the real Trainer
chain the same way (`ensure_trainer_chain`): the Trainer controller manager, the JobSet
controller and kwok, each beside the YAML of its module.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
_BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "controlplane" / "build.sh"
CONTROLPLANE_ENV = "TRAINJOB_DISPATCHER_CONTROLPLANE_BIN"
KUEUE_ENV = "TRAINJOB_DISPATCHER_KUEUE_DIR"


def only_version(crd: dict[str, Any], served: str) -> dict[str, Any]:
    """`crd` serving and storing `served` alone, with no conversion webhook."""
    versions = [dict(v, served=True, storage=True) for v in crd["spec"]["versions"]
                if v["name"] == served]
    if not versions:
        raise ValueError(f"CRD {crd['metadata']['name']} has no version {served}")
    spec = {key: value for key, value in crd["spec"].items() if key != "conversion"}
    return {**crd, "spec": {**spec, "versions": versions}}


class BinariesNotFound(RuntimeError):
    """The binaries are neither cached nor buildable from this checkout."""


@dataclass(frozen=True)
class KueueFiles:
    """The Kueue manager binary and the YAML of its Go module, in one directory."""

    directory: Path

    @property
    def binary(self) -> Path:
        return self.directory / "kueue"

    @property
    def webhooks(self) -> Path:
        return self.directory / "webhook.yaml"

    def kueue_crds(self, *, served: str | None = None) -> list[Path]:
        """Kueue's CRDs; with `served` (e.g. "v1beta2"), copies serving that version only,
        as Kueue's newer releases do (written once beside the originals)."""
        originals = sorted((self.directory / "crd").glob("*.yaml"))
        if served is None:
            return originals
        directory = self.directory / f"crd-{served}-only"
        directory.mkdir(exist_ok=True)
        copies = []
        for original in originals:
            copy = directory / original.name
            if not copy.is_file():
                crd = yaml.safe_load(original.read_text())
                temporary = copy.with_suffix(".tmp")
                temporary.write_text(yaml.safe_dump(only_version(crd, served)))
                temporary.replace(copy)
            copies.append(copy)
        return copies

    def jobset_crds(self) -> list[Path]:
        return sorted((self.directory / "crd-jobset").glob("*.yaml"))

    def complete(self) -> bool:
        return (os.access(self.binary, os.X_OK) and self.webhooks.is_file()
                and bool(self.kueue_crds()) and bool(self.jobset_crds()))


@dataclass(frozen=True)
class TrainerChainFiles:
    """The Trainer, JobSet and kwok binaries and the YAML their modules ship."""

    trainer: Path
    jobset: Path
    kwok: Path

    def trainer_crds(self) -> list[Path]:
        return sorted((self.trainer / "crd").glob("*.yaml"))

    def jobset_crds(self) -> list[Path]:
        return sorted((self.jobset / "crd").glob("*.yaml"))

    def runtimes(self) -> list[Path]:
        """The runtimes the Trainer ships (torch, deepspeed, jax, mlx, xgboost)."""
        return sorted((self.trainer / "runtimes").glob("*.yaml"))

    def kwok_stages(self) -> list[Path]:
        return sorted((self.kwok / "stages").glob("*.yaml"))

    def kwok_crds(self) -> list[Path]:
        """kwok's Logs CRD: which file kwok serves a pod's container logs from."""
        return sorted((self.kwok / "crd").glob("*.yaml"))

    def complete(self) -> bool:
        binaries = (self.trainer / "trainer-controller-manager", self.jobset / "jobset",
                    self.kwok / "kwok")
        return (all(os.access(b, os.X_OK) for b in binaries)
                and (self.trainer / "webhook.yaml").is_file()
                and (self.jobset / "webhook.yaml").is_file()
                and bool(self.trainer_crds()) and bool(self.jobset_crds())
                and bool(self.kwok_stages()) and bool(self.kwok_crds()))


def _complete(directory: Path) -> bool:
    return all(os.access(directory / b, os.X_OK) for b in BINARIES)


def _build(*args: str) -> Path:
    """Run the build script; its last line of output is the directory it made (or the
    directories, separated by spaces)."""
    if not _BUILD_SCRIPT.exists():
        raise BinariesNotFound(f"{_BUILD_SCRIPT} not found: set {CONTROLPLANE_ENV}")
    result = subprocess.run(
        ["bash", str(_BUILD_SCRIPT), *args], check=True, stdout=subprocess.PIPE, text=True
    )
    return Path(result.stdout.strip().splitlines()[-1])


def ensure_binaries() -> Path:
    """Return the directory with the three binaries, building them when missing."""
    override = os.environ.get(CONTROLPLANE_ENV)
    if override:
        directory = Path(override)
        if not _complete(directory):
            raise BinariesNotFound(f"{directory} lacks one of {', '.join(BINARIES)}")
        return directory
    directory = _build()
    if not _complete(directory):
        raise BinariesNotFound(f"build finished but {directory} is incomplete")
    return directory


def ensure_trainer_chain() -> TrainerChainFiles:
    """Return the Trainer chain's binaries and YAML, building them when missing (about
    14 minutes the first time on 2 cores, said on stderr by the build script)."""
    trainer, jobset, kwok = (Path(p) for p in str(_build("trainer")).split())
    files = TrainerChainFiles(trainer=trainer, jobset=jobset, kwok=kwok)
    if not files.complete():
        raise BinariesNotFound(f"the Trainer chain in {trainer}, {jobset}, {kwok} is incomplete")
    return files


def ensure_kueue() -> KueueFiles:
    """Return the Kueue binary and YAML, building them when missing."""
    override = os.environ.get(KUEUE_ENV)
    files = KueueFiles(Path(override) if override else _build("kueue"))
    if not files.complete():
        raise BinariesNotFound(
            f"{files.directory} lacks the kueue binary, webhook.yaml, crd/ or crd-jobset/")
    return files
