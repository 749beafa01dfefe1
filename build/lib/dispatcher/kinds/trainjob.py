"""Kubeflow TrainJobs (`trainer.kubeflow.org/v1alpha1`) as a job kind.

The runtime is the ClusterTrainingRuntime or TrainingRuntime of `spec.runtimeRef`; the
demand is `kinds.trainjob_demand` of the two. A mirror has the job's namespace, name and
spec without `managedBy` (so the worker's own trainer runs it), without `suspend` (a
suspended manager job is placed only while Kueue suspends it) and without the runtime
patch a manager-side Kueue adds (the worker's Kueue adds its own), the origin label and
the manager's UID. It runs while a replicated job has a ready pod (a Pending pod is
active, not running), ends with a True `Complete` or `Failed` condition, and was evicted
by the worker when it is suspended after it started (the dispatcher never suspends a
mirror; it deletes it).
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.conditions import condition
from dispatcher.api.trainer import (
    CLUSTER_TRAINING_RUNTIMES,
    CONDITION_COMPLETE,
    CONDITION_FAILED,
    CONDITION_SUSPENDED,
    GROUP,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    VERSION,
)
from dispatcher.kinds import trainjob_pods
from dispatcher.kinds.trainjob_demand import demand_with_spec, parse_runtime
from dispatcher.placement.options import DemandMode

JSON = dict[str, Any]
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
NAMESPACED_RUNTIME = "TrainingRuntime"
KUEUE_RUNTIME_PATCH_MANAGER = "kueue.x-k8s.io/manager"
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp",
                    "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds",
                    "ownerReferences", "finalizers", "selfLink")


class TrainJobKind:
    """Mirrors of Kubeflow TrainJobs."""

    kind = TRAINJOBS
    status_fields: tuple[str, ...] = ("conditions", "jobsStatus", "trainerStatus")
    runtime_resources = {CLUSTER_RUNTIME: CLUSTER_TRAINING_RUNTIMES,
                         NAMESPACED_RUNTIME: TRAINING_RUNTIMES}

    pods_owner = trainjob_pods.JOBSETS

    def probe_path(self) -> str:
        return f"/apis/{GROUP}/{VERSION}"

    def pods_selector(self, mirror: JSON, *, replicated_job: str | None = None,
                      node_rank: int | None = None) -> str:
        return trainjob_pods.pods_selector(mirror, replicated_job=replicated_job,
                                           node_rank=node_rank)

    def pods_of(self, mirror: JSON, owner: JSON | None, pods: list[JSON]) -> list[JSON]:
        return trainjob_pods.pods_of(mirror, owner, pods)

    def pod_place(self, pod: JSON) -> tuple[str, int]:
        return trainjob_pods.place(pod)

    def runtime_ref(self, job: JSON) -> tuple[str, str]:
        ref = (job.get("spec") or {}).get("runtimeRef") or {}
        if ref.get("kind", CLUSTER_RUNTIME) == NAMESPACED_RUNTIME:
            return NAMESPACED_RUNTIME, f"{job['metadata']['namespace']}/{ref.get('name')}"
        return CLUSTER_RUNTIME, str(ref.get("name"))

    def parse_runtime(self, runtime: JSON) -> Any:
        return parse_runtime(runtime)

    def demand(self, job: JSON, runtime: JSON, parsed_runtime: Any, *,
               mode: DemandMode) -> dict[str, Fraction]:
        name = f"{runtime.get('kind')} {runtime['metadata']['name']!r}"
        return demand_with_spec(job, parsed_runtime, mode=mode, runtime_name=name)

    def pods_priority_class(self, parsed_runtime: Any) -> str:
        """The first `priorityClassName` of the runtime's pod templates ("" for none)."""
        template = parsed_runtime.template.spec if parsed_runtime.template else None
        for replicated in (template.replicated_jobs if template else None) or []:
            job_spec = replicated.template.spec if replicated.template else None
            pod = job_spec.template.spec if job_spec and job_spec.template else None
            if pod is not None and pod.priority_class_name:
                return str(pod.priority_class_name)
        return ""

    def build_mirror(self, job: JSON, *, origin: str, local_queue: str) -> JSON:
        """Same namespace, name and spec without `managedBy`; origin label, manager UID."""
        metadata = job["metadata"]
        labels = dict(metadata.get("labels") or {})
        labels[c.LABEL_ORIGIN] = origin
        if local_queue:
            labels[c.LABEL_KUEUE_QUEUE] = local_queue
        annotations = {
            k: v for k, v in (metadata.get("annotations") or {}).items()
            if not k.startswith(f"{c.PREFIX}/") and k != _LAST_APPLIED
        }
        annotations[c.ANNOTATION_MANAGER_UID] = metadata["uid"]
        spec = copy.deepcopy(job["spec"])
        spec.pop("managedBy", None)
        # A mirror is made only of a job the dispatcher may run: a suspended manager job
        # is Kueue's (kept suspended until its checks are Ready), never the user's wish.
        spec.pop("suspend", None)
        # A manager running Kueue adds its own runtime patch to every TrainJob; the
        # worker's Kueue adds it again, and a duplicate entry is refused there.
        patches = [p for p in spec.get("runtimePatches") or []
                   if p.get("manager") != KUEUE_RUNTIME_PATCH_MANAGER]
        if patches:
            spec["runtimePatches"] = patches
        else:
            spec.pop("runtimePatches", None)
        mirror_metadata = {k: v for k, v in metadata.items() if k not in _SERVER_METADATA}
        mirror_metadata.update(labels=labels, annotations=annotations)
        return {"apiVersion": self.kind.api_version, "kind": "TrainJob",
                "metadata": mirror_metadata, "spec": spec}

    def is_ours(self, remote: JSON, *, manager_uid: str | None, origin: str) -> bool:
        metadata = remote.get("metadata") or {}
        if (metadata.get("labels") or {}).get(c.LABEL_ORIGIN) != origin:
            return False
        if manager_uid is None:
            return True
        return bool((metadata.get("annotations") or {}).get(c.ANNOTATION_MANAGER_UID)
                    == manager_uid)

    def remote_status(self, remote: JSON) -> JSON:
        status = remote.get("status") or {}
        return {k: copy.deepcopy(status[k]) for k in self.status_fields if status.get(k)}

    def finished(self, status: JSON | None) -> JSON | None:
        for type_ in (CONDITION_FAILED, CONDITION_COMPLETE):
            cond = condition(status, type_)
            if cond and cond.get("status") == "True":
                return cond
        return None

    def failed(self, finished: JSON) -> bool:
        return finished.get("type") == CONDITION_FAILED

    def running(self, remote: JSON | None) -> bool:
        """Some pod of the job is ready. A Job counts its Pending pods as active too, so
        `active` alone would call a job running whose pods no node can hold."""
        status = (remote or {}).get("status") or {}
        return any(js.get("ready") for js in status.get("jobsStatus") or [])

    def suspended(self, remote: JSON) -> bool:
        return bool((remote.get("spec") or {}).get("suspend"))

    def evicted_remotely(self, remote: JSON) -> str | None:
        """A message when the worker suspended a mirror that had started, else None."""
        status = remote.get("status") or {}
        suspended = condition(status, CONDITION_SUSPENDED)
        started = any((js.get("active") or js.get("ready") or js.get("succeeded"))
                      for js in status.get("jobsStatus") or [])
        if suspended and suspended.get("status") == "True" and (
            started or suspended.get("reason") not in (None, "", "Suspended")
        ):
            return suspended.get("message") or suspended.get("reason") or "suspended by worker"
        if (remote.get("spec") or {}).get("suspend") and started:
            return "the worker suspended the mirror after it had started"
        return None

    def failed_condition(self, reason: str, message: str, now: str) -> JSON:
        return {"type": CONDITION_FAILED, "status": "True", "reason": reason,
                "message": message, "lastTransitionTime": now}

    def suspended_condition(self, status: JSON | None, now: str) -> JSON:
        previous = condition(status, CONDITION_SUSPENDED)
        return {"type": CONDITION_SUSPENDED, "status": "True", "reason": "Suspended",
                "message": "TrainJob is suspended",
                "lastTransitionTime": (previous or {}).get("lastTransitionTime") or now}
