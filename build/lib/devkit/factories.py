"""Builders of test objects: TrainJobs and runtimes as plain dictionaries."""

from __future__ import annotations

import datetime
from typing import Any

from dispatcher.api.trainer import API_VERSION, GROUP


def trainjob(
    name: str,
    namespace: str,
    *,
    managed_by: str | None = None,
    runtime: str = "torch-distributed",
    runtime_kind: str = "ClusterTrainingRuntime",
    num_nodes: int | None = None,
    resources_per_node: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    suspend: bool | None = None,
    runtime_patches: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "runtimeRef": {"name": runtime, "apiGroup": GROUP, "kind": runtime_kind},
    }
    trainer: dict[str, Any] = {}
    if num_nodes is not None:
        trainer["numNodes"] = num_nodes
    if resources_per_node is not None:
        trainer["resourcesPerNode"] = resources_per_node
    if trainer:
        spec["trainer"] = trainer
    if managed_by is not None:
        spec["managedBy"] = managed_by
    if suspend is not None:
        spec["suspend"] = suspend
    if runtime_patches:
        spec["runtimePatches"] = runtime_patches
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata, "spec": spec}


def condition(type_: str, reason: str, message: str, status: str = "True") -> dict[str, Any]:
    """A metav1.Condition as a trainer (or a worker's Kueue) would write it, now."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now}
