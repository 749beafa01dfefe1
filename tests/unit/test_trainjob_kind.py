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


def test_a_job_runs_once_a_pod_is_ready_not_while_its_pods_are_only_pending() -> None:
    def mirror(*steps: dict[str, int]) -> dict[str, object]:
        return {"status": {"jobsStatus": [{"name": f"s{i}", **step}
                                          for i, step in enumerate(steps)]}}
    kind = TrainJobKind()
    assert not kind.running(None)
    assert not kind.running({"status": {}})
    assert not kind.running(mirror({"active": 2, "ready": 0}))  # made, no node holds them
    assert kind.running(mirror({"active": 2, "ready": 1}))
    assert kind.running(mirror({"succeeded": 1}, {"active": 1, "ready": 1}))  # step two
    assert not kind.running(mirror({"succeeded": 1, "active": 0, "ready": 0}))
