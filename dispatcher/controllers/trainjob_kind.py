"""What the controllers need to know of the job kind they mirror, behind a Protocol.

`JobKind` is the whole contract: build the mirror of a manager object, tell whether a
remote object is our mirror, read the status to copy back, and tell finished or
remotely evicted mirrors apart. `TrainJobKind` implements it for Kubeflow TrainJobs;
another kind (JobSet, batch/Job) would implement the same few methods.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

from dispatcher.api import constants as c
from dispatcher.api.trainer import (
    CONDITION_COMPLETE,
    CONDITION_FAILED,
    CONDITION_SUSPENDED,
    TRAINJOBS,
)
from dispatcher.kube.resource import ResourceKind

JSON = dict[str, Any]
STATUS_FIELDS = ("conditions", "jobsStatus", "trainerStatus")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp",
                    "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds",
                    "ownerReferences", "finalizers", "selfLink")


def condition(obj_or_status: JSON | None, type_: str) -> JSON | None:
    for cond in (obj_or_status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def condition_true(status: JSON | None, type_: str) -> bool:
    cond = condition(status, type_)
    return cond is not None and cond.get("status") == "True"


class JobKind(Protocol):
    kind: ResourceKind

    def build_mirror(self, job: JSON, *, origin: str, local_queue: str) -> JSON: ...
    def is_ours(self, remote: JSON, *, manager_uid: str | None, origin: str) -> bool: ...
    def remote_status(self, remote: JSON) -> JSON: ...
    def finished(self, status: JSON | None) -> JSON | None: ...
    def evicted_remotely(self, remote: JSON) -> str | None: ...


class TrainJobKind:
    """Mirrors of `trainer.kubeflow.org/v1alpha1` TrainJobs."""

    kind = TRAINJOBS

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
        mirror_metadata = {k: v for k, v in metadata.items() if k not in _SERVER_METADATA}
        mirror_metadata.update(labels=labels, annotations=annotations)
        return {
            "apiVersion": self.kind.api_version,
            "kind": "TrainJob",
            "metadata": mirror_metadata,
            "spec": spec,
        }

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
        return {k: copy.deepcopy(status[k]) for k in STATUS_FIELDS if status.get(k)}

    def finished(self, status: JSON | None) -> JSON | None:
        """The Complete or Failed condition when it is True, else None."""
        for type_ in (CONDITION_FAILED, CONDITION_COMPLETE):
            cond = condition(status, type_)
            if cond and cond.get("status") == "True":
                return cond
        return None

    def evicted_remotely(self, remote: JSON) -> str | None:
        """A message when the worker suspended a mirror that had started, else None.

        The dispatcher never suspends a mirror (it deletes it), so a mirror that ran and
        is now suspended was evicted or preempted by the worker's own Kueue.
        """
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
