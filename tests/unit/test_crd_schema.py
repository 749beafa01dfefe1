"""The committed Trainer CRDs are exactly what the generator makes from the models, and
`deploy/crd/` carries the same copy of each of the dispatcher's own CRDs as `config/crd/`."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit.crd_schema import render, trainer_crds, trainjob_schema

CRD_DIR = Path(__file__).resolve().parents[2] / "config" / "crd"


def test_committed_crds_match_the_generator() -> None:
    for name, manifest in trainer_crds().items():
        assert (CRD_DIR / name).read_text() == render(manifest), (
            f"{name} is stale: run `python -m devkit.crd_schema config/crd`"
        )


def test_trainjob_schema_keeps_the_rules_the_dispatcher_relies_on() -> None:
    schema = trainjob_schema()
    spec = schema["properties"]["spec"]
    managed_by = spec["properties"]["managedBy"]
    rules = [r["rule"] for r in managed_by["x-kubernetes-validations"]]
    assert "self == oldSelf" in rules
    assert any("kueue.x-k8s.io/multikueue" in r for r in rules)
    assert schema["properties"]["status"]["minProperties"] == 1
    assert spec["required"] == ["runtimeRef"]
    quantity = spec["properties"]["trainer"]["properties"]["resourcesPerNode"]["properties"][
        "requests"]["additionalProperties"]
    assert quantity["x-kubernetes-int-or-string"] is True


@pytest.mark.parametrize("name", ["dispatcher.trainjob.io_workerclusters.yaml",
                                  "dispatcher.trainjob.io_placements.yaml"])
def test_deploy_carries_the_same_dispatcher_crd(name: str) -> None:
    deployed = CRD_DIR.parents[1] / "deploy" / "crd" / name
    assert deployed.read_text() == (CRD_DIR / name).read_text(), (
        f"deploy/crd/{name} differs from config/crd/{name}")


def test_deploy_has_every_dispatcher_crd() -> None:
    dispatcher_crds = sorted(p.name for p in CRD_DIR.glob("dispatcher.trainjob.io_*.yaml"))
    deployed = sorted(p.name for p in (CRD_DIR.parents[1] / "deploy" / "crd").glob("*.yaml"))
    assert deployed == dispatcher_crds
