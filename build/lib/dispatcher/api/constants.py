"""Every label, annotation, finalizer, condition type and reason the dispatcher writes.

Where a job is placed is on record in a Placement object (`api/placement.py`) in the
dispatcher's namespace, which only the dispatcher writes. On the manager TrainJob (what
`kubectl get -o yaml` / `describe` shows), a read-only view of it, rewritten from the
record when anyone changes it (event `EditUndone`):
- annotation `dispatcher.trainjob.io/cluster`: the worker the job is placed on, written
  together with the finalizer after the record and *before* anything is created
  remotely;
- annotation `dispatcher.trainjob.io/demand`: the resources booked for it on that worker;
- annotation `dispatcher.trainjob.io/evictions`: how many times it was evicted;
- condition `dispatcher.trainjob.io/Dispatched` in `status.conditions`: True while a
  mirror runs it (reason `Placed`, message naming the worker), False with the reason it
  waits otherwise; next to the conditions copied from the mirror;
- events (reason = one of the reasons below) for every placement, rejection, eviction.

On the mirror TrainJob on a worker: label `dispatcher.trainjob.io/origin` (which
dispatcher made it), annotations `dispatcher.trainjob.io/manager-uid` and
`dispatcher.trainjob.io/demand` (what was booked for it, so the ledger counts every live
mirror, recorded or not).
"""

from __future__ import annotations

PREFIX = "dispatcher.trainjob.io"

ANNOTATION_CLUSTER = f"{PREFIX}/cluster"
ANNOTATION_DEMAND = f"{PREFIX}/demand"
ANNOTATION_EVICTIONS = f"{PREFIX}/evictions"
ANNOTATION_MANAGER_UID = f"{PREFIX}/manager-uid"
ANNOTATION_CLUSTER_SELECTOR = f"{PREFIX}/cluster-selector"
"""Set by users: a label selector (`gpu=a100,zone in (x,y)`) the worker's labels must match."""
ANNOTATION_RETRY_ON_REASONS = f"{PREFIX}/retry-on-failure-reasons"
"""Set by users: comma-separated mirror Failed reasons that requeue instead of failing."""

LABEL_ORIGIN = f"{PREFIX}/origin"
LABEL_DISPATCH = f"{PREFIX}/dispatch"
"""Set by users to "true": the opt-in policy (deploy/mutatingadmissionpolicy.yaml) then
sets the TrainJob's spec.managedBy to the dispatcher's, for clients such as the Kubeflow
SDK that cannot set it."""
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"

FINALIZER = f"{PREFIX}/mirror"
FIELD_MANAGER = "trainjob-dispatcher"

CONDITION_DISPATCHED = f"{PREFIX}/Dispatched"
CONDITION_ACTIVE = "Active"

# Reasons of the Dispatched condition and of events on the manager TrainJob.
REASON_PLACED = "Placed"
REASON_WAITING_FOR_QUOTA = "WaitingForQuota"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_NO_ACTIVE_WORKER = "NoActiveWorker"
REASON_RUNTIME_NOT_FOUND = "RuntimeNotFound"
REASON_INVALID_RESOURCES = "InvalidResources"
"""A quantity or count of the job or its runtime is malformed, negative or absurd."""
REASON_INVALID_RUNTIME = "InvalidRuntime"
"""The runtime cannot run the job: no replicated jobs, no pod template, bad dependsOn."""
REASON_INVALID_TRAINJOB = "InvalidTrainJob"
"""The TrainJob itself cannot be read."""
REASON_INVALID_CLUSTER_SELECTOR = "InvalidClusterSelector"
REASON_MIRROR_REJECTED = "MirrorRejected"
REASON_NAME_CONFLICT = "NameConflict"
REASON_SUSPENDED = "Suspended"
REASON_FINISHED = "Finished"
REASON_EVICTED = "Evicted"
REASON_WORKER_LOST = "WorkerLost"
REASON_WORKER_UNREACHABLE = "WorkerUnreachable"
"""Placed on a worker lost past the timeout, kept there (`workers.whenLost: Wait`)."""
REASON_MIRROR_GONE = "MirrorGone"
REASON_MIRROR_EVICTED = "MirrorEvicted"
REASON_DRAINED = "Drained"
REASON_TOO_MANY_EVICTIONS = "TooManyEvictions"
REASON_RETRYING_FAILURE = "RetryingFailure"
REASON_WAITING_FOR_ADMISSION = "WaitingForAdmission"
"""Placed; the mirror waits for the worker's Kueue to admit it."""
REASON_EDIT_UNDONE = "EditUndone"
"""The job's placement annotations or finalizer differed from its record: rewritten."""
REASON_ADOPTED = "Adopted"
"""A live mirror of the job ran without a placement record: recorded where it runs."""
REASON_NOT_CLAIMED = "NoLongerClaimed"
"""A placed job stopped matching the claim rule: its mirror was deleted."""
REASON_RUNTIME_CHANGED = "RuntimeChanged"
"""The job's runtime on its worker changed after it was booked there, before its mirror
was made: placed again with what it needs now (not an eviction)."""
REASON_ADMISSION_TIMEOUT = "AdmissionTimeout"
"""The worker's Kueue did not admit the mirror in time: moved, not counted as an eviction."""
REASON_PREEMPTING = "Preempting"
"""An urgent job waits for the lower-priority jobs it preempts on one worker to end; the
room is held for it there meanwhile."""
REASON_PREEMPTED = "Preempted"
"""The job was taken off its worker to make room for one of higher priority: requeued at
once, not counted as an eviction."""

REASON_WAITING_FOR_KUEUE = "WaitingForKueue"
"""With Kueue on the manager: the job's Workload has no quota reserved, or its check is
not Pending (Kueue queues it; the dispatcher places it only once Kueue asks)."""
REASON_WITHDRAWN_BY_KUEUE = "WithdrawnByKueue"
"""With Kueue on the manager: Kueue evicted, preempted or deactivated the job's Workload,
so its mirror was withdrawn (not an eviction by the dispatcher)."""
REASON_NO_ADMISSION_CHECK = "NoAdmissionCheck"
"""With Kueue on the manager: the job's ClusterQueue has no AdmissionCheck of ours."""
REASON_CHECK_REJECTED = "AdmissionCheckRejected"
"""With Kueue on the manager: our check on the job's Workload was Rejected."""

# Reasons of the Active condition of an AdmissionCheck naming our controller.
REASON_CHECK_ACTIVE = "Active"
"""Some registered worker is usable: the check dispatches."""
REASON_NO_WORKERS = "NoWorkers"
"""No worker is registered with the dispatcher (NoActiveWorker: none of them is usable)."""
REASON_PARAMETERS_NOT_SUPPORTED = "ParametersNotSupported"
"""The AdmissionCheck names a parameters object: the dispatcher takes none."""

# Reasons of a WorkerCluster's Active condition.
REASON_CONNECTED = "Connected"
REASON_BAD_KUBECONFIG = "BadKubeconfig"
REASON_INSECURE_KUBECONFIG = "InsecureKubeconfig"
REASON_SECRET_NOT_FOUND = "SecretNotFound"
REASON_UNREACHABLE = "Unreachable"
REASON_UNAUTHORIZED = "Unauthorized"
REASON_MISSING_CRD = "MissingCRD"
REASON_CONNECTING = "Connecting"
REASON_PROBE_FAILED = "ProbeFailed"
"""The health probe itself failed (a bug, not the worker's answer): restarted shortly."""
REASON_BAD_QUOTA = "BadQuota"
REASON_MISSING_CLUSTER_QUEUE = "MissingClusterQueue"
REASON_INACTIVE_CLUSTER_QUEUE = "InactiveClusterQueue"
