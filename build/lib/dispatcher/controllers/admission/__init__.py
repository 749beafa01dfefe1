"""Kueue on the manager: the dispatcher as the controller of Kueue AdmissionChecks.

With `admissionCheck.controllerName` set, the manager's Kueue queues the jobs (tenant
ClusterQueues, cohorts, fair sharing, preemption) and the dispatcher places them, where
MultiKueue would: `gate.py` reads a job's Workload into whether the job may be placed
now, or may stay placed (the jobs controller asks it instead of the job's `suspend`,
which is Kueue's in this mode); `decide.py` says, from the Workload and where the job
is, what our check's state should be (`Ready` once the mirror exists, `Retry` once the
job lost its worker, `Rejected` when no worker can ever hold it) and whether each of
our AdmissionChecks is `Active`; `controller.py` reads the manager's Workloads and
AdmissionChecks and writes both.
"""
