"""Demand of TrainJobs for each runtime shape (pure, no cluster)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from devkit.factories import trainjob
from dispatcher.kinds.trainjob_demand import DemandError, trainjob_demand
from dispatcher.placement.options import DemandMode
from dispatcher.placement.quantity import parse_quantity as q

STEP = "trainer.kubeflow.org/trainjob-ancestor-step"


def replicated(name: str, *, step: str | None = None, replicas: int = 1,
               parallelism: int | None = None, completions: int | None = None,
               containers: list[dict[str, Any]] | None = None,
               init_containers: list[dict[str, Any]] | None = None,
               depends_on: list[str] | None = None) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"template": {"spec": {
        "containers": containers or [{"name": name, "image": "x"}]}}}
    if init_containers:
        job_spec["template"]["spec"]["initContainers"] = init_containers
    if parallelism is not None:
        job_spec["parallelism"] = parallelism
    if completions is not None:
        job_spec["completions"] = completions
    entry: dict[str, Any] = {"name": name, "replicas": replicas,
                             "template": {"spec": job_spec}}
    if step:
        entry["template"]["metadata"] = {"labels": {STEP: step}}
    if depends_on:
        entry["dependsOn"] = [{"name": d, "status": "Complete"} for d in depends_on]
    return entry


def container(name: str, **requests: str) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"requests": dict(requests)}}


def runtime(*jobs: dict[str, Any], ml_policy: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": list(jobs)}}}
    if ml_policy is not None:
        spec["mlPolicy"] = ml_policy
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "r"}, "spec": spec}


def test_torch_multi_node_with_resources_per_node_override() -> None:
    rt = runtime(replicated("node", step="trainer",
                            containers=[container("node", cpu="1", memory="2Gi"),
                                        container("sidecar", cpu="100m")]),
                 ml_policy={"numNodes": 1, "torch": {}})
    job = trainjob("j", "ns", num_nodes=4,
                   resources_per_node={"requests": {"cpu": "8", "nvidia.com/gpu": 2}})
    demand = trainjob_demand(job, rt)
    assert demand == {"cpu": 4 * q("8.1"), "memory": 4 * q("2Gi"),
                      "nvidia.com/gpu": Fraction(8), "pods": Fraction(4)}


def test_num_nodes_falls_back_to_ml_policy_then_one() -> None:
    rt = runtime(replicated("node", step="trainer", containers=[container("node", cpu="2")]),
                 ml_policy={"numNodes": 3})
    assert trainjob_demand(trainjob("j", "ns"), rt)["cpu"] == 6
    bare = runtime(replicated("node", step="trainer", containers=[container("node", cpu="2")]))
    assert trainjob_demand(trainjob("j", "ns"), bare)["pods"] == 1


def test_mpi_launcher_as_node_counts_one_node_less() -> None:
    rt = runtime(
        replicated("launcher", containers=[container("launcher", cpu="1")]),
        replicated("node", step="trainer", containers=[container("node", cpu="4")]),
        ml_policy={"numNodes": 4, "mpi": {"runLauncherAsNode": True}})
    demand = trainjob_demand(trainjob("j", "ns"), rt)
    assert demand["pods"] == 1 + 3
    assert demand["cpu"] == 1 + 3 * 4


def test_initializers_are_summed_and_peak_of_steps_takes_the_largest() -> None:
    rt = runtime(
        replicated("dataset-initializer", step="dataset-initializer",
                   containers=[container("dataset-initializer", cpu="2", memory="8Gi")]),
        replicated("model-initializer", step="model-initializer",
                   containers=[container("model-initializer", cpu="2", memory="16Gi")]),
        replicated("node", step="trainer", containers=[container("node", cpu="4", memory="4Gi")],
                   depends_on=["dataset-initializer", "model-initializer"]),
    )
    job = trainjob("j", "ns", num_nodes=2)
    total = trainjob_demand(job, rt)
    assert total["cpu"] == 2 + 2 + 8
    assert total["memory"] == q("8Gi") + q("16Gi") + q("8Gi")
    peak = trainjob_demand(job, rt, mode=DemandMode.PEAK_OF_STEPS)
    assert peak["cpu"] == 8
    assert peak["memory"] == q("24Gi")
    assert peak["pods"] == 2


def test_init_containers_count_by_max_and_limits_default_requests() -> None:
    rt = runtime(replicated(
        "node", step="trainer",
        containers=[{"name": "node", "image": "x", "resources": {"limits": {"cpu": "3"}}}],
        init_containers=[container("warmup", cpu="5"), container("fetch", cpu="1")]))
    assert trainjob_demand(trainjob("j", "ns"), rt)["cpu"] == 5


def test_parallelism_and_completions_of_other_jobs() -> None:
    rt = runtime(replicated("node", step="trainer", containers=[container("node", cpu="1")]),
                 replicated("eval", replicas=2, parallelism=3, completions=2,
                            containers=[container("eval", cpu="1")]))
    assert trainjob_demand(trainjob("j", "ns"), rt)["pods"] == 1 + 2 * 2


def test_job_without_requests_needs_only_pods() -> None:
    rt = runtime(replicated("node", step="trainer"))
    assert trainjob_demand(trainjob("j", "ns", num_nodes=3), rt) == {"pods": Fraction(3)}


def test_runtime_without_replicated_jobs_is_an_error() -> None:
    with pytest.raises(DemandError):
        trainjob_demand(trainjob("j", "ns"), runtime())


def test_a_name_too_long_for_the_jobset_of_its_runtime_is_refused_with_the_longest_allowed(
) -> None:
    rt = runtime(replicated("node", step="trainer", containers=[container("node", cpu="1")]))
    # The trainer's indexed pods are the longest: "<name>-node-0-<node>-abcde".
    longest_fit = "j" * (63 - len("-node-0-9-abcde"))
    assert trainjob_demand(trainjob(longest_fit, "ns", num_nodes=10), rt)["pods"] == 10
    with pytest.raises(DemandError) as refused:
        trainjob_demand(trainjob(longest_fit, "ns", num_nodes=11), rt)  # "-node-0-10-abcde"
    assert refused.value.reason == "InvalidTrainJob"
    assert f"at most {len(longest_fit) - 1} characters" in str(refused.value)
    assert "64 > 63 characters" in str(refused.value)
    # A Job name counts too: "<name>-dataset-initializer-0" for an initializer.
    rt = runtime(replicated("dataset-initializer", step="dataset-initializer"),
                 replicated("node", step="trainer", containers=[container("node", cpu="1")]))
    initializer_limit = 63 - len("-dataset-initializer-0")
    with pytest.raises(DemandError, match="dataset-initializer-0"):
        trainjob_demand(trainjob("i" * (initializer_limit + 1), "ns"), rt)
    trainjob_demand(trainjob("i" * initializer_limit, "ns"), rt)


def test_alike_jobs_share_one_demand_and_unlike_ones_do_not() -> None:
    """A queue of 20,000 alike jobs keeps one demand vector (the fleet's memory per job)."""
    rt = runtime(replicated("node", step="trainer", containers=[container("node", cpu="2")]),
                 ml_policy={"numNodes": 2, "torch": {}})
    first = trainjob_demand(trainjob("a", "ns"), rt)
    second = trainjob_demand(trainjob("b", "other"), rt)
    bigger = trainjob_demand(trainjob("c", "ns", num_nodes=3), rt)
    assert first == second and first is second
    assert bigger == {"cpu": Fraction(6), "pods": Fraction(3)} and bigger is not first
