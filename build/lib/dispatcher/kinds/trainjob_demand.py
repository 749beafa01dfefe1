"""How much a TrainJob needs: a pure function of the job and its training runtime.

The TrainJob kind's demand (read through the Trainer's own models); the arithmetic of
amounts and their checks are kind-free (`placement.resources`, `placement.validation`).

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

Every amount and count is checked on the way (`placement.validation`): a negative,
malformed or absurd one, a count below 1, an empty runtime or a `dependsOn` that names
no replicated job or runs in a cycle raise `DemandError` naming the field, so nothing
unsound ever reaches the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, TypeAlias

from kubeflow_trainer_api import models

from dispatcher.api import constants as c
from dispatcher.api.trainer import ANCESTOR_STEP_LABEL, NODE_CONTAINER, TRAINER_STEP
from dispatcher.placement import resources
from dispatcher.placement.options import DemandMode
from dispatcher.placement.validation import (
    DemandError,
    checked_count,
    checked_quantities,
    checked_total,
)

__all__ = ["DemandError", "demand_with_spec", "parse_runtime", "parse_trainjob",
           "pod_request", "trainjob_demand"]

Vector = dict[str, Fraction]
Requirements: TypeAlias = models.IoK8sApiCoreV1ResourceRequirements
_TRAINER_PATH = "spec.trainer"


def _requirements(res: Requirements | None, *, path: str) -> tuple[Vector, Vector]:
    if res is None:
        return {}, {}
    return (checked_quantities(res.requests, path=f"{path}.requests"),
            checked_quantities(res.limits, path=f"{path}.limits"))


def _container_request(container: models.IoK8sApiCoreV1Container, *, path: str,
                       override: Requirements | None = None) -> Vector:
    requests, limits = _requirements(container.resources, path=f"{path}.resources")
    if override is not None:
        extra_requests, extra_limits = _requirements(
            override, path=f"{_TRAINER_PATH}.resourcesPerNode")
        requests.update(extra_requests)
        limits.update(extra_limits)
    effective = dict(limits)
    effective.update(requests)
    return effective


def pod_request(spec: models.IoK8sApiCoreV1PodSpec, *, path: str = "spec",
                node_override: Requirements | None = None) -> Vector:
    """Resources one pod requests: max(sum of containers, largest init) + overhead."""
    main = resources.add(*(
        _container_request(container, path=f"{path}.containers[{container.name}]",
                           override=node_override if container.name == NODE_CONTAINER else None)
        for container in spec.containers or []
    ))
    init_containers = spec.init_containers or []
    sidecars = resources.add(*(
        _container_request(container, path=f"{path}.initContainers[{container.name}]")
        for container in init_containers if container.restart_policy == "Always"))
    init = resources.maximum(
        _container_request(container, path=f"{path}.initContainers[{container.name}]")
        for container in init_containers if container.restart_policy != "Always")
    overhead = checked_quantities(spec.overhead, path=f"{path}.overhead")
    return resources.add(resources.maximum([resources.add(main, sidecars), init]), overhead)


def _is_trainer_step(replicated: models.JobsetV1alpha2ReplicatedJob) -> bool:
    labels = (replicated.template.metadata.labels or {}) if replicated.template.metadata else {}
    step = labels.get(ANCESTOR_STEP_LABEL)
    return bool(step == TRAINER_STEP) if step else replicated.name == "node"


def _trainer_nodes(job: models.TrainerV1alpha1TrainJob,
                   policy: models.TrainerV1alpha1MLPolicy | None, *, runtime: str) -> int:
    trainer = job.spec.trainer if job.spec else None
    nodes = checked_count(trainer.num_nodes if trainer else None,
                          path=f"{_TRAINER_PATH}.numNodes", default=0)
    if not nodes:
        nodes = checked_count(policy.num_nodes if policy else None,
                              path=f"{runtime} spec.mlPolicy.numNodes", default=1)
    if policy and policy.mpi and policy.mpi.run_launcher_as_node:
        return max(nodes - 1, 1)
    return nodes


def _replicated_job_demand(
    replicated: models.JobsetV1alpha2ReplicatedJob,
    *,
    job: models.TrainerV1alpha1TrainJob,
    policy: models.TrainerV1alpha1MLPolicy | None,
    runtime: str,
) -> Vector:
    path = f"{runtime} spec.template.spec.replicatedJobs[{replicated.name}]"
    job_spec = replicated.template.spec
    if job_spec is None or job_spec.template is None or job_spec.template.spec is None:
        raise DemandError(f"{path}: replicated job {replicated.name!r} has no pod template")
    pod_path = f"{path}.template.spec.template.spec"
    replicas = checked_count(replicated.replicas, path=f"{path}.replicas", default=1)
    trainer = job.spec.trainer if job.spec else None
    if _is_trainer_step(replicated):
        count = _trainer_nodes(job, policy, runtime=runtime)
        per_pod = pod_request(job_spec.template.spec, path=pod_path,
                              node_override=trainer.resources_per_node if trainer else None)
    else:
        parallelism = checked_count(job_spec.parallelism,
                                    path=f"{path}.template.spec.parallelism", default=1)
        completions = checked_count(job_spec.completions,
                                    path=f"{path}.template.spec.completions", default=parallelism)
        count = min(parallelism, completions)
        per_pod = pod_request(job_spec.template.spec, path=pod_path)
    pods = replicas * count
    total = resources.scale(per_pod, pods)
    total[resources.PODS] = Fraction(pods)
    return total


MAX_NAME_LENGTH = 63
"""Kubernetes' limit for the names (DNS-1035 labels) JobSet gives the Jobs and pods."""
_POD_SUFFIX = "-abcde"
"""The five random characters a pod's generated name ends with, as JobSet counts them."""


def _check_name_fits(job: models.TrainerV1alpha1TrainJob,
                     replicated_jobs: list[models.JobsetV1alpha2ReplicatedJob], *,
                     policy: models.TrainerV1alpha1MLPolicy | None, runtime: str) -> None:
    """The worker's JobSet refuses a JobSet whose Jobs or indexed pods would get names
    longer than 63 characters, and its Trainer then never starts the job: refuse such a
    job here, with the longest name it may have."""
    name = (job.metadata.name if job.metadata else None) or ""
    for replicated in replicated_jobs:
        replicas = replicated.replicas or 1
        longest = f"{name}-{replicated.name}-{replicas - 1}"
        if _is_trainer_step(replicated):
            nodes = _trainer_nodes(job, policy, runtime=runtime)
            longest = f"{longest}-{nodes - 1}{_POD_SUFFIX}"
        excess = len(longest) - MAX_NAME_LENGTH
        if excess > 0:
            raise DemandError(
                f"metadata.name: {name!r} is too long for the JobSet the Trainer makes of it "
                f"with {runtime}: it would name a Job or pod {longest!r} ({len(longest)} > "
                f"{MAX_NAME_LENGTH} characters); at most {len(name) - excess} characters",
                reason=c.REASON_INVALID_TRAINJOB)


def _steps(replicated_jobs: list[models.JobsetV1alpha2ReplicatedJob], *,
           runtime: str) -> list[list[str]]:
    """Replicated job names grouped by dependsOn depth: a step waits for the one before.

    A dependsOn that names no replicated job, or runs in a cycle, is an error: JobSet
    would refuse such a job on the worker.
    """
    by_name = {r.name: r for r in replicated_jobs}
    for replicated in replicated_jobs:
        for dependency in replicated.depends_on or []:
            if dependency.name not in by_name:
                raise DemandError(
                    f"{runtime} spec.template.spec.replicatedJobs[{replicated.name}].dependsOn: "
                    f"{dependency.name!r} is not a replicated job of the runtime")
    depth: dict[str, int] = {}

    def depth_of(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name in depth:
            return depth[name]
        if name in seen:
            raise DemandError(f"{runtime} spec.template.spec.replicatedJobs: dependsOn "
                              f"cycle through {name!r}")
        parents = [d.name for d in by_name[name].depends_on or []]
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
        raise DemandError(f"TrainJob cannot be read: {error}",
                          reason=c.REASON_INVALID_TRAINJOB) from error


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
    name = f"{runtime.get('kind', 'runtime')} {(runtime.get('metadata') or {}).get('name')!r}"
    return demand_with_spec(job, parse_runtime(runtime), mode=mode, runtime_name=name)


def demand_with_spec(
    job: Mapping[str, Any],
    spec: models.TrainerV1alpha1TrainingRuntimeSpec,
    *,
    mode: DemandMode = DemandMode.SUM,
    runtime_name: str = "runtime",
) -> Vector:
    """`trainjob_demand` with the runtime already parsed (`parse_runtime`);
    `runtime_name` ("ClusterTrainingRuntime 'torch'") prefixes the runtime's fields
    in error messages."""
    parsed = parse_trainjob(job)
    template = spec.template.spec if spec.template else None
    replicated_jobs = (template.replicated_jobs if template else None) or []
    if not replicated_jobs:
        raise DemandError(f"{runtime_name} has no replicated jobs")
    steps = _steps(replicated_jobs, runtime=runtime_name)
    per_job = {
        r.name: _replicated_job_demand(r, job=parsed, policy=spec.ml_policy,
                                       runtime=runtime_name)
        for r in replicated_jobs
    }
    _check_name_fits(parsed, replicated_jobs, policy=spec.ml_policy, runtime=runtime_name)
    if mode == DemandMode.PEAK_OF_STEPS:
        demand = resources.maximum(resources.add(*(per_job[n] for n in step)) for step in steps)
    else:
        demand = resources.add(*per_job.values())
    return checked_total(demand, what="the job")
