"""The TrainJob kind's mirror: what travels to the worker and what does not."""

from __future__ import annotations

from devkit.factories import trainjob
from dispatcher.api import constants as c
from dispatcher.kinds.trainjob import KUEUE_RUNTIME_PATCH_MANAGER, TrainJobKind


def test_mirror_drops_managed_by_and_a_manager_kueue_runtime_patch() -> None:
    job = trainjob("j", "ns", managed_by="kueue.x-k8s.io/multikueue")
    job["metadata"]["uid"] = "u1"
    job["spec"]["runtimePatches"] = [
        {"manager": KUEUE_RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {}},
        {"manager": "example.com/team", "trainingRuntimeSpec": {}},
    ]
    mirror = TrainJobKind().build_mirror(job, origin="o", local_queue="q")
    assert "managedBy" not in mirror["spec"]
    assert mirror["spec"]["runtimePatches"] == [
        {"manager": "example.com/team", "trainingRuntimeSpec": {}}]
    assert mirror["metadata"]["labels"][c.LABEL_KUEUE_QUEUE] == "q"
    assert mirror["metadata"]["annotations"][c.ANNOTATION_MANAGER_UID] == "u1"
    job["spec"]["runtimePatches"] = job["spec"]["runtimePatches"][:1]
    only_kueue = TrainJobKind().build_mirror(job, origin="o", local_queue="")
    assert "runtimePatches" not in only_kueue["spec"]
