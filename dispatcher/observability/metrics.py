"""Prometheus metrics of the dispatcher, all prefixed `dispatcher_`.

Labels are bounded: worker names, resource names, reasons, verbs and codes; never job
names. Each instance owns its own registry, so tests can run several dispatchers in one
process.
"""

from __future__ import annotations

from enum import IntEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_WAIT_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._job_metrics(self.registry)
        self._latency_metrics(self.registry)
        self._worker_metrics(self.registry)
        self._process_metrics(self.registry)

    def _job_metrics(self, r: CollectorRegistry) -> None:
        """What happens to the jobs: states, placements, evictions, reconciles."""
        self.jobs = Gauge("dispatcher_jobs", "Claimed, unfinished TrainJobs by state (pending; "
                          "placed, of which running: a pod ready) and worker ('' while "
                          "pending).",
                          ["state", "worker"], registry=r)
        self.jobs_by_reason = Gauge(
            "dispatcher_jobs_by_reason",
            "Claimed, unfinished TrainJobs by the reason of their Dispatched condition "
            "(Placed, WaitingForQuota, Unschedulable, InvalidResources, ...; New before "
            "the first decision).", ["reason"], registry=r)
        self.placements = Counter("dispatcher_placements_total",
                                  "Jobs placed on a worker.", ["worker"], registry=r)
        self.evictions = Counter("dispatcher_evictions_total",
                                 "Jobs evicted from a worker and requeued.",
                                 ["worker", "reason"], registry=r)
        self.preemptions = Counter("dispatcher_preemptions_total",
                                   "Jobs taken off a worker to make room for a job of higher "
                                   "priority (placement.preemption.policy: LowerPriority).",
                                   ["worker"], registry=r)
        self.requeues = Counter("dispatcher_requeues_total",
                                "Jobs put back in the queue.", ["reason"], registry=r)
        self.dispatch_errors = Counter("dispatcher_dispatch_errors_total",
                                       "Mirror creations refused or failed.",
                                       ["worker", "reason"], registry=r)
        self.scheduling_passes = Counter(
            "dispatcher_scheduling_passes_total",
            "Scheduling passes over the pending jobs (none runs while no job is pending).",
            registry=r)
        self.scheduling_pass_seconds = Histogram(
            "dispatcher_scheduling_pass_seconds",
            "Time of one scheduling pass over every pending job (the scheduler's decisions).",
            buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r)
        self.scheduling_decisions = Counter(
            "dispatcher_scheduling_decisions_total",
            "Decisions made by the scheduling passes: one per pending job a pass looked at.",
            registry=r)
        self.reconciles = Counter("dispatcher_reconciles_total",
                                  "Reconciles of a TrainJob by result (done, requeue, error).",
                                  ["result"], registry=r)
        self.edits_undone = Counter(
            "dispatcher_placement_edits_undone_total",
            "Placement annotations or finalizers on manager jobs that differed from the "
            "placement record and were rewritten from it.", registry=r)
        self.garbage_collected = Counter("dispatcher_mirrors_garbage_collected_total",
                                         "Orphan mirrors deleted.", ["worker"], registry=r)
        self.pending_jobs = Gauge("dispatcher_pending_jobs",
                                  "Claimed jobs waiting for a placement.", registry=r)

    def _latency_metrics(self, r: CollectorRegistry) -> None:
        self.dispatch_latency = Histogram(
            "dispatcher_dispatch_latency_seconds",
            "From the manager TrainJob's creation to its mirror created on a worker.",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.status_sync_latency = Histogram(
            "dispatcher_status_sync_latency_seconds",
            "From a mirror status change seen to the manager status updated.",
            buckets=_LATENCY_BUCKETS, registry=r)
        self.quota_wait = Histogram(
            "dispatcher_quota_wait_seconds",
            "Time a job waited in the queue before it was placed.",
            buckets=_WAIT_BUCKETS, registry=r)

    def _worker_metrics(self, r: CollectorRegistry) -> None:
        """Each worker: usable or not, and its quota as booked, used by others and free."""
        self.worker_active = Gauge(
            "dispatcher_worker_active",
            "1 when the worker is usable: connected, healthy (probe and watches) and its "
            "caches synced, so mirrors may be created there; 0 otherwise (connecting, "
            "unreachable, refused credentials, missing CRD or queue, ...).",
            ["worker"], registry=r)
        self.worker_quota = Gauge("dispatcher_worker_quota", "Quota per worker and resource.",
                                  ["worker", "resource"], registry=r)
        self.worker_used = Gauge("dispatcher_worker_used",
                                 "Quota booked by placed jobs per worker and resource.",
                                 ["worker", "resource"], registry=r)
        self.worker_used_by_others = Gauge(
            "dispatcher_worker_used_by_others",
            "Quota held on the worker's Kueue ClusterQueue by jobs that are not this "
            "dispatcher's, per worker and resource.", ["worker", "resource"], registry=r)
        self.worker_free = Gauge("dispatcher_worker_free",
                                 "Quota the worker can still give this dispatcher now, per "
                                 "worker and resource.",
                                 ["worker", "resource"], registry=r)

    def _process_metrics(self, r: CollectorRegistry) -> None:
        """The process: API requests, watches, the reconcile queue, leadership."""
        self.api_requests = Counter("dispatcher_api_requests_total",
                                    "API requests by cluster, verb and HTTP code (0: no answer).",
                                    ["cluster", "verb", "code"], registry=r)
        self.api_latency = Histogram("dispatcher_api_request_duration_seconds",
                                     "API request latency by cluster and verb.",
                                     ["cluster", "verb"], buckets=_LATENCY_BUCKETS, registry=r)
        self.watch_restarts = Gauge("dispatcher_watch_restarts",
                                    "Watch restarts after errors, per cluster.",
                                    ["cluster"], registry=r)
        self.queue_depth = Gauge("dispatcher_workqueue_depth",
                                 "Keys waiting in the reconcile queue.", registry=r)
        self.queue_wait = Histogram(
            "dispatcher_workqueue_queue_duration_seconds",
            "From a key's add to its reconcile, by the lane it was served from (urgent: "
            "news about placed jobs; prompt: placements holding quota; ordinary).",
            ["lane"], buckets=_LATENCY_BUCKETS, registry=r)
        self.leader = Gauge("dispatcher_leader", "1 while this replica leads.", registry=r)

    def scheduling_pass(self, seconds: float, decisions: int) -> None:
        self.scheduling_passes.inc()
        self.scheduling_pass_seconds.observe(seconds)
        self.scheduling_decisions.inc(decisions)

    def queue_waited(self, lane: IntEnum, seconds: float) -> None:
        self.queue_wait.labels(lane.name.lower()).observe(seconds)

    def observe_request(self, cluster: str, verb: str, code: int, seconds: float) -> None:
        self.api_requests.labels(cluster, verb, str(code)).inc()
        self.api_latency.labels(cluster, verb).observe(seconds)
