"""How much a TrainJob needs: a pure function of the job and its training runtime.

For each replicated job of the runtime's JobSet template:
  pods = replicas x per-replica count, where the count is `min(parallelism, completions)`
  (default 1), except for the trainer step (the replicated job labelled
  `trainer.kubeflow.org/trainjob-ancestor-step: trainer`, or named `node`), whose count
  is `trainer.numNodes`, else `mlPolicy.numNodes`, else 1, and with MPI
  `runLauncherAsNode` `max(numNodes - 1, 1)`;
  per pod: the sum of the containers' requests (a request defaults to its limit) or the
  largest init container, whichever is bigger per resource, plus the pod overhead; the
  trainer step's `node` container takes `trainer.resourcesPerNode` over its template,
  resource by resource.
`Sum` mode adds every replicated job, initializers included (what Kueue counts).
`PeakOfSteps` mode orders replicated jobs by their JobSet `dependsOn` edges and takes the
largest step, since a step starts only when the one before it has finished.

A job that requests nothing at all still needs its pods: its demand is `pods` alone,
which fits any worker that does not cap pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from kubeflow_trainer_api import models

from dispatcher.api.trainer import ANCESTOR_STEP_LABEL, NODE_CONTAINER, TRAINER_STEP
from dispatcher.placement import resources
from dispatcher.placement.options import DemandMode
from dispatcher.placement.quantity import parse_quantity

Vector = dict[str, Fraction]


class DemandError(ValueError):
    """The job or its runtime cannot be sized; the message says why."""


def _quantities(raw: Mapping[str, Any] | None) -> Vector:
    if not raw:
        return {}
    return {name: parse_quantity(getattr(q, "actual_instance", q)) for name, q in raw.items()}


def _container_request(
    container: models.IoK8sApiCoreV1Container,
    override: models.IoK8sApiCoreV1ResourceRequirements | None,
) -> Vector:
    res = container.resources
    requests = _quantities(res.requests if res else None)
    limits = _quantities(res.limits if res else None)
    if override is not None:
        requests.update(_quantities(override.requests))
        limits.update(_quantities(override.limits))
    effective = dict(limits)
    effective.update(requests)
    return effective


def pod_request(
    spec: models.IoK8sApiCoreV1PodSpec,
    *,
    node_override: models.IoK8sApiCoreV1ResourceRequirements | None = None,
) -> Vector:
    """Resources one pod requests: max(sum of containers, largest init) + overhead."""
    main = resources.add(*(
        _container_request(c, node_override if c.name == NODE_CONTAINER else None)
        for c in spec.containers or []
    ))
    sidecars = [c for c in spec.init_containers or [] if c.restart_policy == "Always"]
    main = resources.add(main, *(_container_request(c, None) for c in sidecars))
    init = resources.maximum(
        _container_request(c, None) for c in spec.init_containers or []
        if c.restart_policy != "Always"
    )
    return resources.add(resources.maximum([main, init]), _quantities(spec.overhead))


def _is_trainer_step(replicated: models.JobsetV1alpha2ReplicatedJob) -> bool:
    labels = (replicated.template.metadata.labels or {}) if replicated.template.metadata else {}
    step = labels.get(ANCESTOR_STEP_LABEL)
    return bool(step == TRAINER_STEP) if step else replicated.name == "node"


def _trainer_nodes(
    job: models.TrainerV1alpha1TrainJob, policy: models.TrainerV1alpha1MLPolicy | None
) -> int:
    trainer = job.spec.trainer if job.spec else None
    nodes = (trainer.num_nodes if trainer else None) or (policy.num_nodes if policy else None)
    nodes = nodes or 1
    if policy and policy.mpi and policy.mpi.run_launcher_as_node:
        return max(nodes - 1, 1)
    return nodes


def _replicated_job_demand(
    replicated: models.JobsetV1alpha2ReplicatedJob,
    *,
    job: models.TrainerV1alpha1TrainJob,
    policy: models.TrainerV1alpha1MLPolicy | None,
) -> Vector:
    job_spec = replicated.template.spec
    if job_spec is None or job_spec.template is None or job_spec.template.spec is None:
        raise DemandError(f"replicated job {replicated.name!r} has no pod template")
    replicas = replicated.replicas if replicated.replicas is not None else 1
    trainer = job.spec.trainer if job.spec else None
    if _is_trainer_step(replicated):
        count = _trainer_nodes(job, policy)
        per_pod = pod_request(
            job_spec.template.spec,
            node_override=trainer.resources_per_node if trainer else None,
        )
    else:
        parallelism = job_spec.parallelism if job_spec.parallelism is not None else 1
        completions = job_spec.completions if job_spec.completions is not None else parallelism
        count = min(parallelism, completions)
        per_pod = pod_request(job_spec.template.spec)
    pods = replicas * count
    total = resources.scale(per_pod, pods)
    total[resources.PODS] = Fraction(pods)
    return total


def _steps(replicated_jobs: list[models.JobsetV1alpha2ReplicatedJob]) -> list[list[str]]:
    """Replicated job names grouped by dependsOn depth: a step waits for the one before."""
    depth: dict[str, int] = {}
    by_name = {r.name: r for r in replicated_jobs}

    def depth_of(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name in depth:
            return depth[name]
        if name in seen:
            raise DemandError(f"dependsOn cycle through {name!r}")
        parents = [d.name for d in by_name[name].depends_on or [] if d.name in by_name]
        depth[name] = 1 + max((depth_of(p, seen | {name}) for p in parents), default=-1)
        return depth[name]

    for name in by_name:
        depth_of(name)
    steps: dict[int, list[str]] = {}
    for name, level in depth.items():
        steps.setdefault(level, []).append(name)
    return [steps[level] for level in sorted(steps)]


def parse_trainjob(raw: Mapping[str, Any]) -> models.TrainerV1alpha1TrainJob:
    try:
        return models.TrainerV1alpha1TrainJob.from_dict(dict(raw))
    except Exception as error:
        raise DemandError(f"TrainJob cannot be read: {error}") from error


def parse_runtime(raw: Mapping[str, Any]) -> models.TrainerV1alpha1TrainingRuntimeSpec:
    try:
        spec = models.TrainerV1alpha1TrainingRuntimeSpec.from_dict(dict(raw.get("spec") or {}))
    except Exception as error:
        raise DemandError(f"runtime cannot be read: {error}") from error
    if spec is None:
        raise DemandError("runtime has no spec")
    return spec


def trainjob_demand(
    job: Mapping[str, Any], runtime: Mapping[str, Any], *, mode: DemandMode = DemandMode.SUM
) -> Vector:
    """The resources `job` needs when run with `runtime` (both raw objects)."""
    return demand_with_spec(job, parse_runtime(runtime), mode=mode)


def demand_with_spec(
    job: Mapping[str, Any],
    spec: models.TrainerV1alpha1TrainingRuntimeSpec,
    *,
    mode: DemandMode = DemandMode.SUM,
) -> Vector:
    """`trainjob_demand` with the runtime already parsed (`parse_runtime`)."""
    parsed = parse_trainjob(job)
    template = spec.template.spec if spec.template else None
    replicated_jobs = (template.replicated_jobs if template else None) or []
    if not replicated_jobs:
        raise DemandError("runtime has no replicated jobs")
    per_job = {
        r.name: _replicated_job_demand(r, job=parsed, policy=spec.ml_policy)
        for r in replicated_jobs
    }
    if mode == DemandMode.PEAK_OF_STEPS:
        steps = _steps(replicated_jobs)
        return resources.maximum(resources.add(*(per_job[n] for n in step)) for step in steps)
    return resources.add(*per_job.values())
