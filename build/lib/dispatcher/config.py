"""The whole configuration: one root made of groups, every field with unit and default.

Loaded from a YAML file (`dispatcher run --config FILE`) and overridable by environment
variables with the `DISPATCHER_` prefix and `__` between levels
(`DISPATCHER_CLIENT__QPS=500`). `tests/unit/test_config.py` pins the defaults, and the
configuration reference (`docs/reference/configuration.md`) is generated from these
models.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE
from dispatcher.placement.options import (
    DemandMode,
    PlacementPolicy,
    PreemptionPolicy,
    QueueingStrategy,
)


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ClaimConfig(_Group):
    """Which manager TrainJobs the dispatcher takes over."""

    managed_by: str = Field(
        MANAGED_BY_MULTIKUEUE, alias="managedBy",
        description="spec.managedBy value that marks a TrainJob as ours.",
    )
    namespaces: list[str] = Field(
        default_factory=list,
        description="Only claim jobs in these namespaces; empty means all namespaces.",
    )
    label_selector: str = Field(
        "", alias="labelSelector",
        description="Only claim jobs whose labels match this selector; empty matches all.",
    )


class ClientConfig(_Group):
    """Limits of each worker's API client (and the manager's)."""

    qps: float = Field(200.0, gt=0, description="Sustained requests per second per cluster.")
    burst: int = Field(400, gt=0, description="Requests allowed at once above the QPS.")
    timeout_seconds: float = Field(
        15.0, alias="timeoutSeconds", gt=0,
        description="Timeout of every API call, so a hung cluster never blocks the others.",
    )


class StaticWorker(_Group):
    """A worker registered in the config file instead of by a WorkerCluster object."""

    name: str
    kubeconfig: Path = Field(description="Path of the worker's kubeconfig file.")
    quota: dict[str, str] = Field(default_factory=dict,
                                  description="Declared quota, resource -> quantity.")
    labels: dict[str, str] = Field(default_factory=dict)
    local_queue: str = Field("", alias="localQueue",
                             description="Kueue LocalQueue to label mirrors with.")
    cluster_queue: str = Field("", alias="clusterQueue",
                               description="Kueue ClusterQueue whose free quota is honoured.")
    cordoned: bool = False


class WhenWorkerLost(StrEnum):
    REQUEUE = "Requeue"
    """Place the jobs elsewhere (MultiKueue's behaviour): they run again soon, but a
    copy may still run on the lost worker until it answers and its copy is deleted."""
    WAIT = "Wait"
    """Keep the jobs placed on the lost worker until it answers again, is drained or is
    removed: never two copies of a job at once, at the price of waiting."""


class WorkersConfig(_Group):
    """How workers are found, connected and judged lost."""

    from_crd: bool = Field(
        True, alias="fromCRD",
        description="Read WorkerCluster objects (and their Secrets) from the manager.",
    )
    static: list[StaticWorker] = Field(default_factory=list,
                                       description="Workers listed in this file.")
    probe_interval_seconds: float = Field(
        10.0, alias="probeIntervalSeconds", gt=0,
        description="How often each worker's health is probed.",
    )
    lost_timeout_seconds: float = Field(
        900.0, alias="lostTimeoutSeconds", ge=0,
        description="How long a worker may be unreachable before its jobs are evicted "
                    "(MultiKueue's workerLostTimeout), counted from when the first "
                    "unanswered probe was sent.",
    )
    when_lost: WhenWorkerLost = Field(
        WhenWorkerLost.REQUEUE, alias="whenLost",
        description="What happens to the jobs of a worker lost past lostTimeoutSeconds: "
                    "Requeue places them elsewhere (a copy may still run on the lost "
                    "worker meanwhile); Wait keeps them there until the worker answers, "
                    "is drained or is removed (never two copies at once).",
    )
    create_namespaces: bool = Field(
        True, alias="createNamespaces",
        description="Create the job's namespace on the worker when it is missing.",
    )
    allow_insecure_kubeconfigs: bool = Field(
        False, alias="allowInsecureKubeconfigs",
        description="Accept kubeconfigs with exec/auth-provider plugins or file references.",
    )


class PreemptionConfig(_Group):
    """Whether an urgent job may take room from running jobs of lower priority."""

    policy: PreemptionPolicy = Field(
        PreemptionPolicy.NEVER,
        description="Never: a job that fits nowhere waits. LowerPriority: it preempts jobs "
                    "of strictly lower priority on the one worker where the fewest and "
                    "least valuable victims make room (they are requeued with reason "
                    "Preempted, not counted as evictions). Standalone mode only: with Kueue "
                    "on the manager (admissionCheck.controllerName), the manager's Kueue "
                    "preempts.",
    )


class PlacementConfig(_Group):
    """How pending jobs are ordered and where they go."""

    policy: PlacementPolicy = Field(PlacementPolicy.MOST_FREE,
                                    description="MostFree spreads, BestFit packs.")
    queueing_strategy: QueueingStrategy = Field(
        QueueingStrategy.BEST_EFFORT_FIFO, alias="queueingStrategy",
        description="BestEffortFIFO lets smaller jobs pass one that does not fit.",
    )
    demand_mode: DemandMode = Field(
        DemandMode.SUM, alias="demandMode",
        description="Sum of all replicated jobs, or the largest dependsOn step.",
    )
    rejection_backoff_seconds: float = Field(
        300.0, alias="rejectionBackoffSeconds", ge=0,
        description="How long a worker that rejected a job (or did not admit it in time, "
                    "or preempted it) is not tried again for it.",
    )
    admission_timeout_seconds: float = Field(
        300.0, alias="admissionTimeoutSeconds", ge=0,
        description="How long a mirror may wait for the worker's Kueue to admit it before "
                    "the job is placed elsewhere (not counted as an eviction); 0 waits "
                    "forever.",
    )
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)


class MirrorConfig(_Group):
    """What happens to mirrors."""

    origin: str = Field(
        "trainjob-dispatcher",
        description="Value of the origin label; distinguishes dispatchers sharing workers.",
    )
    keep_finished: bool = Field(
        False, alias="keepFinished",
        description="Keep a mirror on its worker after it completed or failed, until its "
                    "manager TrainJob is deleted (see retainFinishedSeconds for a limit).",
    )
    retain_finished_seconds: float = Field(
        3600.0, alias="retainFinishedSeconds", ge=0,
        description="How long a finished mirror stays on its worker with its pods, so "
                    "that `dispatcher logs` and the worker's events can still be read; "
                    "its quota is released at the finish all the same. It goes when the "
                    "time is up (an hour by default) or its manager TrainJob is deleted; 0 "
                    "deletes it at the finish.",
    )
    max_evictions: int = Field(
        5, alias="maxEvictions", ge=1,
        description="Evictions after which a job is marked Failed instead of requeued.",
    )
    requeue_backoff_seconds: float = Field(
        5.0, alias="requeueBackoffSeconds", ge=0,
        description="Delay before an evicted job is placed again, doubled per eviction "
                    "(none after its worker was lost: the job was not at fault).",
    )


class CheckReadyWhen(StrEnum):
    MIRROR_CREATED = "MirrorCreated"
    """Our check goes Ready once the mirror exists on its worker (as MultiKueue's does)."""
    WORKER_ADMITTED = "WorkerAdmitted"
    """Ready once the worker's Kueue has admitted the mirror too (at once on a worker
    without Kueue): till then the check stays Pending saying where the job waits, and
    the manager job stays suspended and counts in its ClusterQueue as not yet admitted."""


class AdmissionCheckConfig(_Group):
    """Kueue on the manager: the dispatcher as the controller of Kueue AdmissionChecks."""

    controller_name: str = Field(
        "", alias="controllerName",
        description="spec.controllerName of the manager's AdmissionChecks this dispatcher "
                    "serves (e.g. dispatcher.trainjob.io/multicluster): the manager's Kueue "
                    "queues the jobs, and a job is placed only once its Workload has quota "
                    "and this check is Pending. Empty (the default) runs standalone: the "
                    "dispatcher's own queue, no Kueue on the manager.",
    )
    ready_when: CheckReadyWhen = Field(
        CheckReadyWhen.MIRROR_CREATED, alias="readyWhen",
        description="When our check of a Workload goes Ready: MirrorCreated (once the "
                    "mirror exists on its worker) or WorkerAdmitted (once the worker's "
                    "Kueue admitted it too; Pending, saying so, till then).",
    )


class GCConfig(_Group):
    interval_seconds: float = Field(60.0, alias="intervalSeconds", gt=0,
                                    description="How often orphan mirrors are collected.")


class ServerConfig(_Group):
    host: str = Field("0.0.0.0", description="Address of /metrics, /healthz and /readyz.")
    port: int = Field(8080, ge=0, le=65535, description="Port of the same; 0 picks one.")
    status_page: bool = Field(
        True, alias="statusPage",
        description="Serve the read-only status page (/ and /api/status) on statusHost:"
                    "statusPort (it shows every namespace's job names).",
    )
    status_host: str = Field(
        "127.0.0.1", alias="statusHost",
        description="Address of the status page: loopback, reached with `kubectl "
                    "port-forward`, unless set to one the network reaches on purpose.")
    status_port: int = Field(8081, alias="statusPort", ge=0, le=65535,
                             description="Port of the status page; 0 picks one.")
    logs: bool = Field(
        True, description="Serve the jobs' logs (GET /logs/NAMESPACE/NAME, what "
                          "`dispatcher logs` reads) on logsHost:logsPort, to callers whose "
                          "bearer token may get that TrainJob on the manager.")
    logs_host: str = Field(
        "127.0.0.1", alias="logsHost",
        description="Address of the logs endpoint: loopback unless set to one the network "
                    "reaches (behind TLS: callers send their manager token).")
    logs_port: int = Field(8082, alias="logsPort", ge=0, le=65535,
                           description="Port of the logs endpoint; 0 picks one.")


class LeaderElectionConfig(_Group):
    """Several replicas: only the holder of the Lease works; the others stand by."""

    enabled: bool = Field(False, description="Run only while holding the Lease.")
    lease_name: str = Field("trainjob-dispatcher", alias="leaseName",
                            description="Name of the Lease in the dispatcher's namespace.")
    lease_duration_seconds: int = Field(
        15, alias="leaseDurationSeconds", gt=0,
        description="How long a standby waits after the last renewal before taking over.")
    renew_deadline_seconds: int = Field(
        10, alias="renewDeadlineSeconds", gt=0,
        description="How long the leader keeps trying to renew before it steps down.")
    retry_period_seconds: int = Field(2, alias="retryPeriodSeconds", ge=1,
                                        description="Time between attempts (at least 1).")

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionConfig:
        if not (self.lease_duration_seconds > self.renew_deadline_seconds
                > 1.2 * self.retry_period_seconds):
            raise ValueError("need leaseDuration > renewDeadline > 1.2 x retryPeriod")
        return self


class DispatcherConfig(BaseSettings):
    """The root of the configuration."""

    model_config = SettingsConfigDict(
        env_prefix="DISPATCHER_", env_nested_delimiter="__", extra="forbid",
        populate_by_name=True,
    )

    namespace: str = Field(
        "trainjob-dispatcher",
        description="The dispatcher's own namespace; worker kubeconfig Secrets are read "
                    "only from here.",
    )
    manager_kubeconfig: Path | None = Field(
        None, alias="managerKubeconfig",
        description="Kubeconfig of the manager; unset means in-cluster.",
    )
    reconcile_workers: int = Field(16, alias="reconcileWorkers", ge=1,
                                   description="Concurrent reconciles of manager TrainJobs.")
    claim: ClaimConfig = Field(default_factory=ClaimConfig)
    client: ClientConfig = Field(default_factory=ClientConfig)
    workers: WorkersConfig = Field(default_factory=WorkersConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    mirror: MirrorConfig = Field(default_factory=MirrorConfig)
    admission_check: AdmissionCheckConfig = Field(default_factory=AdmissionCheckConfig,
                                                  alias="admissionCheck")
    gc: GCConfig = Field(default_factory=GCConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    leader_election: LeaderElectionConfig = Field(
        default_factory=LeaderElectionConfig,
        alias="leaderElection",
    )
    json_logs: bool = Field(False, alias="jsonLogs", description="Log one JSON object a line.")

    @classmethod
    def from_file(cls, path: Path) -> DispatcherConfig:
        """Load a YAML file; environment variables still override it."""
        data: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
        return cls(**data)


def reference_markdown() -> str:
    """The configuration reference table (of `docs/reference/configuration.md`), made from
    the models."""
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            key = f"{prefix}{field.alias or name}"
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{key}.")
                continue
            default = field.get_default(call_default_factory=True)
            shown = default.value if hasattr(default, "value") else default
            rows.append(f"| `{key}` | `{shown!r}` | {field.description or ''} |")

    walk(DispatcherConfig, "")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
