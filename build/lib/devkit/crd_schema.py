"""Builds the Kubeflow Trainer CRDs that the local clusters serve.

The structural OpenAPI schemas come from the `kubeflow-trainer-api` pydantic models
(Trainer v2.3): references are inlined, optional fields lose their `null` branch,
quantities and int-or-string fields become `x-kubernetes-int-or-string`, and embedded
object metadata stays an open object. On top of that go the rules of the upstream CRDs
the dispatcher relies on: the `managedBy` values and their immutability, the RFC 1035
name rule, `status` with `minProperties: 1`, the list-map keys of conditions.
Descriptions are dropped to keep the CRDs small and quick to install.

`python -m devkit.crd_schema config/crd` rewrites the files; a unit test checks
the committed ones match.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from kubeflow_trainer_api import models

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
MANAGED_BY_DEFAULT = "trainer.kubeflow.org/trainjob-controller"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"

_INT_OR_STRING_DEFS = {
    "IoK8sApimachineryPkgApiResourceQuantity",
    "IoK8sApimachineryPkgUtilIntstrIntOrString",
}
_OPEN_OBJECT_DEFS = {"IoK8sApimachineryPkgApisMetaV1ObjectMeta"}
_KEPT_KEYS = {
    "type", "properties", "items", "additionalProperties", "required", "enum", "format",
    "maxItems", "minItems", "pattern", "maximum", "minimum", "maxLength", "minLength",
}
_INT_OR_STRING: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}
_OPEN_OBJECT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

Schema = dict[str, Any]


def structural(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Return `node` as a structural schema with every reference inlined."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in _INT_OR_STRING_DEFS:
            return dict(_INT_OR_STRING)
        if name in _OPEN_OBJECT_DEFS:
            return dict(_OPEN_OBJECT)
        return structural(defs[name], defs)
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) == 1:
            return structural(branches[0], defs)
        return dict(_OPEN_OBJECT)
    out: Schema = {}
    for key, value in node.items():
        if key not in _KEPT_KEYS:
            continue
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = structural(value, defs)
        else:
            out[key] = value
    if "type" not in out:
        return dict(_OPEN_OBJECT)
    if out["type"] == "object" and not out.get("properties") and "additionalProperties" not in out:
        return dict(_OPEN_OBJECT)
    return out


def model_schema(model: Any) -> Schema:
    raw = model.model_json_schema()
    schema = structural(raw, raw.get("$defs", {}))
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def _list_map(schema: Schema, key: str, *, max_items: int | None = None) -> None:
    schema["x-kubernetes-list-type"] = "map"
    schema["x-kubernetes-list-map-keys"] = [key]
    if key not in schema["items"].setdefault("required", []):
        schema["items"]["required"].append(key)
    if max_items is not None:
        schema["maxItems"] = max_items


def _runtime_ref_rules(runtime_ref: Schema) -> None:
    props = runtime_ref["properties"]
    props["apiGroup"]["default"] = GROUP
    props["kind"]["default"] = "ClusterTrainingRuntime"
    props["kind"]["enum"] = ["TrainingRuntime", "ClusterTrainingRuntime"]
    runtime_ref["x-kubernetes-validations"] = [
        {"rule": "self == oldSelf", "message": "runtimeRef is immutable"}
    ]


def trainjob_schema() -> Schema:
    schema = model_schema(models.TrainerV1alpha1TrainJob)
    schema["x-kubernetes-validations"] = [
        {
            "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "message": "metadata.name must be a valid RFC 1035 label",
        },
        {"rule": "size(self.metadata.name) <= 63", "message": "metadata.name is too long"},
    ]
    spec = schema["properties"]["spec"]
    props = spec["properties"]
    props["managedBy"]["default"] = MANAGED_BY_DEFAULT
    props["managedBy"]["x-kubernetes-validations"] = [
        {
            "rule": f"self in ['{MANAGED_BY_DEFAULT}', '{MANAGED_BY_MULTIKUEUE}']",
            "message": f"ManagedBy must be {MANAGED_BY_DEFAULT} or {MANAGED_BY_MULTIKUEUE}",
        },
        {"rule": "self == oldSelf", "message": "ManagedBy value is immutable"},
    ]
    _runtime_ref_rules(props["runtimeRef"])
    for immutable in ("trainer", "initializer", "activeDeadlineSeconds"):
        props[immutable]["x-kubernetes-validations"] = [
            {"rule": "self == oldSelf", "message": f"{immutable} is immutable"}
        ]
    _list_map(props["runtimePatches"], "manager", max_items=16)
    status = schema["properties"]["status"]
    status["minProperties"] = 1
    _list_map(status["properties"]["conditions"], "type", max_items=8)
    _list_map(status["properties"]["jobsStatus"], "name")
    return schema


def runtime_schema(model: Any) -> Schema:
    schema = model_schema(model)
    return schema


def crd(*, kind: str, plural: str, scope: str, schema: Schema, status: bool) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version["subresources"] = {"status": {}}
        version["additionalPrinterColumns"] = [
            {"name": "State", "type": "string",
             "jsonPath": ".status.conditions[-1:].type"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "scope": scope,
            "versions": [version],
        },
    }


def trainer_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD manifest for TrainJob and both runtime kinds."""
    return {
        "trainer.kubeflow.org_trainjobs.yaml": crd(
            kind="TrainJob", plural="trainjobs", scope="Namespaced",
            schema=trainjob_schema(), status=True,
        ),
        "trainer.kubeflow.org_trainingruntimes.yaml": crd(
            kind="TrainingRuntime", plural="trainingruntimes", scope="Namespaced",
            schema=runtime_schema(models.TrainerV1alpha1TrainingRuntime), status=False,
        ),
        "trainer.kubeflow.org_clustertrainingruntimes.yaml": crd(
            kind="ClusterTrainingRuntime", plural="clustertrainingruntimes", scope="Cluster",
            schema=runtime_schema(models.TrainerV1alpha1ClusterTrainingRuntime), status=False,
        ),
    }


def render(manifest: dict[str, Any]) -> str:
    header = "# Generated by `python -m devkit.crd_schema config/crd`; do not edit.\n"
    return header + yaml.safe_dump(manifest, sort_keys=True, width=1000)


def main(argv: list[str]) -> None:
    directory = Path(argv[1] if len(argv) > 1 else "config/crd")
    for name, manifest in trainer_crds().items():
        (directory / name).write_text(render(manifest))


if __name__ == "__main__":
    main(sys.argv)
