"""Which pods on a worker are a TrainJob mirror's, and where each stands in the job.

The Trainer runs a TrainJob as a JobSet of the same name, controlled by the TrainJob;
JobSet labels each pod with the JobSet's name and UID and its replicated job, and a
replicated job's Indexed Job gives each pod its completion index: the node rank
(`JOB_COMPLETION_INDEX`, what torchrun's `--node-rank` reads). Pods are found by the
name label, then kept only when their UID label is that of the JobSet the mirror
controls: an object of the same name that the mirror did not make never lends its pods.
"""

from __future__ import annotations

from typing import Any

from dispatcher.kube.resource import ResourceKind

JSON = dict[str, Any]
JOBSETS = ResourceKind("jobset.x-k8s.io", "v1alpha2", "jobsets", namespaced=True)
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def pods_selector(mirror: JSON, *, replicated_job: str | None = None,
                  node_rank: int | None = None) -> str:
    """The label selector of the mirror's pods (of one replicated job, one rank)."""
    terms = [f"{JOBSET_NAME}={mirror['metadata']['name']}"]
    if replicated_job is not None:
        terms.append(f"{REPLICATED_JOB}={replicated_job}")
    if node_rank is not None:
        terms.append(f"{COMPLETION_INDEX}={node_rank}")
    return ",".join(terms)


def controlled_by(owner: JSON, uid: str) -> bool:
    return any(ref.get("controller") and ref.get("uid") == uid
               for ref in owner["metadata"].get("ownerReferences") or [])


def pods_of(mirror: JSON, jobset: JSON | None, pods: list[JSON]) -> list[JSON]:
    """The pods the mirror made through `jobset` (the JobSet of its name, when there is
    one), in the order of `place`."""
    if jobset is None or not controlled_by(jobset, mirror["metadata"]["uid"]):
        return []
    uid = jobset["metadata"]["uid"]
    mine = [pod for pod in pods if (pod["metadata"].get("labels") or {}).get(JOBSET_UID) == uid]
    return sorted(mine, key=lambda pod: (place(pod), pod["metadata"]["name"]))


def place(pod: JSON) -> tuple[str, int]:
    """(replicated job, node rank) of a pod; rank -1 when its Job is not indexed."""
    labels = pod["metadata"].get("labels") or {}
    index = labels.get(COMPLETION_INDEX, "")
    return labels.get(REPLICATED_JOB, ""), int(index) if index.isdigit() else -1

