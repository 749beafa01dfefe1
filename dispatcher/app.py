"""Wiring: configuration -> clients -> caches -> controllers, in one asyncio.TaskGroup.

`Dispatcher` is the process: the health and metrics server, and leadership (alone, or
while holding the Lease). Each leadership term is one `LeaderTerm`, built whole when the
term starts: the manager's caches, the workers, the controllers and their loops, every
part there for the whole term.

Start-up order matters for correctness: the manager's caches (TrainJobs, runtimes and
the Placement records in the dispatcher's namespace) sync first, then the workers are
connected, then the quota ledger is rebuilt from the placement records, and only then
may the scheduling loop place anything; a worker is offered only once its mirrors are
listed (each live one counted in the ledger) and its stale ones collected. So a
restarted dispatcher never books the same quota twice, nor less than what runs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import uuid
from collections.abc import Callable
from typing import Any

from dispatcher.api.placement import PLACEMENTS, placements_of
from dispatcher.api.workercluster import WORKER_CLUSTERS
from dispatcher.claim import Claim
from dispatcher.clock import Clock, SystemClock
from dispatcher.config import DispatcherConfig
from dispatcher.controllers.admission.controller import AdmissionCheckController
from dispatcher.controllers.capacity import Capacities
from dispatcher.controllers.gc import GarbageCollector
from dispatcher.controllers.jobs.bookkeeping import Bookkeeper
from dispatcher.controllers.jobs.controller import JobsController
from dispatcher.controllers.jobs.manager_side import ManagerWriter
from dispatcher.controllers.jobs.priority import PriorityCache
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.jobs.snapshot import SnapshotReader
from dispatcher.controllers.jobs.worker_side import WorkerWriter
from dispatcher.controllers.logs import JobLogs
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.controllers.victims import running_jobs, still_joining
from dispatcher.controllers.workerclusters import WorkerClustersController
from dispatcher.controllers.workers import ConnectionOptions, WorkerConnection, WorkerRegistry
from dispatcher.kinds import JobKind
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.informer import Informer, InformerSettings
from dispatcher.kube.leader import lead
from dispatcher.kube.resource import SECRETS, Resource
from dispatcher.kube.workqueue import Lane, Result, WorkQueue
from dispatcher.logs_endpoint import LogsEndpoint
from dispatcher.observability import termview
from dispatcher.observability.events import EventRecorder
from dispatcher.observability.gauges import Gauges, Reading
from dispatcher.observability.metrics import Metrics
from dispatcher.observability.server import Site, health_site, status_site
from dispatcher.observability.statusview import StatusView, build_view
from dispatcher.placement.ledger import Ledger
from dispatcher.placement.options import PreemptionPolicy
from dispatcher.placement.scheduler import Decision
from dispatcher.supervision import Body, TaskOwner, guarded

log = logging.getLogger(__name__)
_GAUGE_INTERVAL_SECONDS = 2.0
_RESTART_SECONDS = 1.0


def client_settings(config: DispatcherConfig) -> ClientSettings:
    cfg = config.client
    return ClientSettings(qps=cfg.qps, burst=cfg.burst, timeout_seconds=cfg.timeout_seconds)


def _registrations(manager: ClusterClient, config: DispatcherConfig, settings: InformerSettings,
                   clock: Clock) -> tuple[Informer | None, Informer | None]:
    """The WorkerCluster objects and the Secrets of the dispatcher's namespace (their
    kubeconfigs), when workers are registered that way."""
    if not config.workers.from_crd:
        return None, None
    return (Informer(Resource(manager, WORKER_CLUSTERS), settings=settings,
                     name="manager/workerclusters", clock=clock),
            Informer(Resource(manager, SECRETS), namespace=config.namespace, settings=settings,
                     name="manager/secrets", clock=clock))


class NoAdmissionChecks:
    """Standalone (no `admissionCheck.controllerName`): no checks to keep, nothing to
    watch; the jobs' `suspend` is the user's to say."""

    informers: list[Informer] = []

    def job_changed(self, key: str) -> None:
        pass

    def workers_changed(self) -> None:
        pass

    async def run(self) -> None:
        await asyncio.Event().wait()  # nothing to do, for the whole term


AdmissionChecks = AdmissionCheckController | NoAdmissionChecks


def _admission(term: LeaderTerm, manager: ClusterClient, settings: InformerSettings
               ) -> AdmissionChecks:
    """With `admissionCheck.controllerName`: the controller of our Kueue AdmissionChecks,
    whose Workload news makes the job's reconcile urgent; else a stand-in doing nothing."""
    name = term.config.admission_check.controller_name
    if not name:
        return NoAdmissionChecks()
    return AdmissionCheckController(
        controller_name=name, manager=manager, kind=term.kind, claim=term.claim,
        origin=term.config.mirror.origin, trainjobs=term.trainjobs, records=term.records,
        registry=term.registry, settings=settings, clock=term.clock,
        on_job=lambda key: term.queue.add(key, lane=Lane.URGENT),
        explain=lambda key: term.jobs.explain(key),
        ready_when=term.config.admission_check.ready_when)


def _jobs_controller(term: LeaderTerm, *, manager: ClusterClient,
                     runtimes: dict[str, Informer]) -> JobsController:
    """The term's jobs controller and its parts: the snapshot reader, the writers on the
    manager and on the workers, and the ledger's bookkeeper."""
    cfg, kind, clock, metrics = term.config, term.kind, term.clock, term.metrics
    reader = SnapshotReader(
        config=cfg, claim=term.claim, kind=kind, trainjobs=term.trainjobs,
        records=term.records, runtimes=runtimes, registry=term.registry, ledger=term.ledger,
        scheduling=term.scheduling, priorities=PriorityCache(manager, clock=clock),
        clock=clock, gates=(term.admission.gate
                            if isinstance(term.admission, AdmissionCheckController) else None))
    return JobsController(
        config=cfg, claim=term.claim, kind=kind, registry=term.registry, ledger=term.ledger,
        scheduling=term.scheduling, trainjobs=term.trainjobs, records=term.records,
        reader=reader,
        manager=ManagerWriter(kind=kind, trainjobs=term.trainjobs, records=term.records,
                              metrics=metrics, clock=clock),
        workers=WorkerWriter(kind=kind, origin=cfg.mirror.origin,
                             create_namespaces=cfg.workers.create_namespaces, metrics=metrics),
        bookkeeper=Bookkeeper(kind=kind, origin=cfg.mirror.origin, ledger=term.ledger,
                              scheduling=term.scheduling, trainjobs=term.trainjobs,
                              records=term.records, reader=reader),
        queue=term.queue, events=term.events, metrics=metrics, clock=clock,
    )


class LeaderTerm:
    """Everything one leadership term runs; `run()` until cancelled, then all of it stops."""

    def __init__(self, *, config: DispatcherConfig, manager: ClusterClient, kind: JobKind,
                 claim: Claim, ledger: Ledger, capacities: Capacities, metrics: Metrics,
                 clock: Clock, instance: str) -> None:
        cfg = self.config = config
        self.kind = kind
        self.claim = claim
        self.ledger = ledger
        self.capacities = capacities
        self.metrics = metrics
        self.clock = clock
        self.gauges = Gauges(metrics, clock=clock)
        self.tasks = TaskOwner(clock=clock)
        """Tasks started from callbacks: garbage collection of a (re)connected worker."""
        settings = InformerSettings()
        self.queue = WorkQueue(name="trainjobs", clock=clock, on_wait=metrics.queue_waited)
        self.trainjobs = Informer(
            Resource(manager, kind.kind), settings=settings, name="manager/trainjobs",
            clock=clock, indexes=termview.reason_index(claim=claim, kind=kind))
        runtimes = {name: Informer(Resource(manager, resource), settings=settings,
                                   name=f"manager/{resource.plural}", clock=clock)
                    for name, resource in kind.runtime_resources.items()}
        placements = Informer(Resource(manager, PLACEMENTS), namespace=cfg.namespace,
                              settings=settings, name="manager/placements", clock=clock)
        self.records = PlacementRecords(placements)
        worker_clusters, secrets = _registrations(manager, cfg, settings, clock)
        self.registry = self._registry(settings)
        self.events = EventRecorder(manager, instance=instance, clock=clock)
        self.scheduling = SchedulingLoop(
            ledger=ledger, workers=lambda: capacities.views(self.registry.workers.values()),
            policy=cfg.placement.policy, strategy=cfg.placement.queueing_strategy,
            on_decision=self._on_decision, on_pass=metrics.scheduling_pass,
            preemption=(cfg.placement.preemption.policy
                        if not cfg.admission_check.controller_name else PreemptionPolicy.NEVER),
            running=lambda: {} if any(map(still_joining, self.registry.workers.values()))
            else running_jobs(self.registry.workers.values(), ledger=ledger,
                              records=self.records, victims=self.scheduling.victims_on,
                              now=clock.time()),
            wall=clock.time, on_victim=lambda key: self.queue.add(key, lane=Lane.PROMPT),
        )
        self.admission = _admission(self, manager, settings)
        self.informers = [self.trainjobs, *runtimes.values(), placements,
                          *(i for i in (worker_clusters, secrets) if i is not None),
                          *self.admission.informers]
        self.started = asyncio.Event()
        """Set once the caches are synced, the workers connected and the ledger rebuilt."""
        self.jobs = _jobs_controller(self, manager=manager, runtimes=runtimes)
        self.worker_clusters = WorkerClustersController(
            config=cfg, registry=self.registry, capacity_of=capacities.of,
            worker_clusters=worker_clusters, secrets=secrets, clock=clock,
            missing_runtimes_of=self.scheduling.missing_runtimes)
        self.gc = GarbageCollector(
            manager=manager, trainjobs=self.trainjobs, records=self.records,
            registry=self.registry, claim=claim, kind=kind,
            mirror_config=cfg.mirror, interval=cfg.gc.interval_seconds, metrics=metrics,
            clock=clock,
            on_opened=self._on_worker_opened)
        self.logs = JobLogs(trainjobs=self.trainjobs, records=self.records,
                            registry=self.registry, claim=claim, kind=kind,
                            origin=cfg.mirror.origin)
        self.trainjobs.add_handler(self.jobs.on_job_event)
        placements.add_handler(self.jobs.on_record_event)
        for runtime_informer in runtimes.values():
            runtime_informer.add_handler(self.jobs.on_runtime_event)
        for informer in (worker_clusters, secrets):
            if informer is not None:
                informer.add_handler(self.worker_clusters.trigger)

    def _registry(self, settings: InformerSettings) -> WorkerRegistry:
        """The term's worker connections, whose news comes back to the term's callbacks."""
        cfg = self.config
        return WorkerRegistry(
            options=ConnectionOptions(
                client_settings=client_settings(cfg), informer_settings=settings,
                kind=self.kind, origin=cfg.mirror.origin,
                probe_interval=cfg.workers.probe_interval_seconds,
                on_change=self._on_worker_change, observer=self.metrics.observe_request,
                clock=self.clock, on_workload=self._on_workload_news,
                on_runtime=self._on_worker_runtime),
            on_mirror_event=self._on_mirror_event, on_mirrors_reset=self._on_mirrors_reset,
        )

    async def run(self, *, on_ready: Callable[[], None]) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for informer in self.informers:
                    self._guard(group, f"informer/{informer.name}", informer.run)
                # Not restarted: a failed start-up (or work queue) fails the leading work.
                group.create_task(self._start_when_synced(on_ready),
                                  name="reconcile-trainjobs")
                for name, body in (
                        ("scheduling", self.scheduling.run),
                        ("workerclusters", self.worker_clusters.run),
                        ("garbage-collector", self.gc.run), ("events", self.events.run),
                        ("gauges", functools.partial(self.gauges.run, self.reading,
                                                     interval=_GAUGE_INTERVAL_SECONDS))):
                    self._guard(group, name, body)
                self._guard(group, "admission-checks", self._run_admission)
        finally:
            await self.tasks.close()
            await self.registry.close()

    def _guard(self, group: asyncio.TaskGroup, name: str, body: Body) -> None:
        """Run `body` in `group` as task `name`, logged and restarted whenever it ends."""
        group.create_task(guarded(name, body, clock=self.clock, restart_delay=_RESTART_SECONDS),
                          name=name)

    async def _start_when_synced(self, on_ready: Callable[[], None]) -> None:
        """Sync caches, connect workers, rebuild the ledger; then reconcile (forever)."""
        await asyncio.gather(*(i.synced.wait() for i in self.informers))
        await self.worker_clusters.sync()
        booked = self.jobs.bookkeeper.rebuild()
        log.info("caches synced; ledger rebuilt with %d placed jobs", booked)
        for key in [*self.trainjobs.store, *(r.key for r in self.records.all())]:
            self.queue.add(key)
        self.scheduling.ready.set()
        self.started.set()
        on_ready()
        await self.queue.run_workers(self._reconcile, workers=self.config.reconcile_workers)

    async def _run_admission(self) -> None:
        """Our checks move only once the term knows where every job is."""
        await self.started.wait()
        await self.admission.run()

    async def _reconcile(self, key: str) -> Result:
        try:
            result = await self.jobs.reconcile(key)
        except Exception:
            self.metrics.reconciles.labels("error").inc()
            raise
        finally:
            self.admission.job_changed(key)
        self.metrics.reconciles.labels("done" if result.requeue_after is None
                                       else "requeue").inc()
        return result

    # ----- callbacks of the workers and the scheduler -----

    def _on_worker_change(self, worker: WorkerConnection) -> None:
        self.jobs.on_worker_change(worker)
        self.worker_clusters.trigger()
        self.admission.workers_changed()
        self.gauges.worker_usable(worker.name, worker.usable())
        if worker.usable() and not worker.collected:
            self.tasks.start_once(f"worker/{worker.name}/gc-on-connect",
                                  lambda: self.gc.collect_until_open(worker))

    def _on_mirrors_reset(self, worker: str) -> None:
        self.ledger.forget_mirrors(worker)
        self.scheduling.trigger()

    def _on_worker_opened(self, worker: WorkerConnection) -> None:
        """Its stale mirrors are collected: the scheduler may place on it now."""
        self.scheduling.trigger()
        self.worker_clusters.trigger()

    def _on_mirror_event(self, worker: str, event_type: str, obj: dict[str, Any]) -> None:
        self.jobs.on_mirror_event(worker, event_type, obj)

    def _on_workload_news(self, worker: str, key: str) -> None:
        self.jobs.on_workload_news(worker, key)

    def _on_worker_runtime(self, worker: str, event_type: str, obj: dict[str, Any]) -> None:
        """A runtime came, changed or went on a worker: what its pending jobs need there
        (or whether they can run there at all) may have changed."""
        self.jobs.on_runtime_event(event_type, obj, worker=worker)

    def _on_decision(self, decision: Decision) -> None:
        self.jobs.on_decision(decision.key, placed=decision.worker is not None)

    # ----- what the gauges and the status page read -----

    def reading(self) -> Reading:
        return termview.reading(
            workers=self.registry.workers.values(), capacity_of=self.capacities.of,
            ledger=self.ledger, jobs=self.trainjobs.store, kind=self.kind,
            pending=len(self.scheduling.pending), queue_depth=len(self.queue),
            reasons=self.trainjobs.counts(termview.BY_REASON))

    def status_view_build(self, offset: int, limit: int) -> Callable[[], StatusView]:
        return termview.status_view_inputs(
            workers=self.registry.workers.values(),
            registrations=self.worker_clusters.worker_clusters,
            desired_status=self.worker_clusters.desired_status, jobs=self.trainjobs.store,
            claim=self.claim, kind=self.kind, placements=self.placements(),
            pending=self.scheduling.pending.values(), events=self.events.recent,
            offset=offset, limit=limit)

    def placements(self) -> dict[str, str]:
        """Job UID -> the worker its Placement record names, for every placed job."""
        return placements_of(self.records.all())


class Dispatcher:
    """One dispatcher process; `run()` until cancelled."""

    def __init__(self, config: DispatcherConfig, *,
                 manager_kubeconfig: dict[str, Any] | None = None,
                 instance: str | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.kind = TrainJobKind()
        self.claim = Claim(config.claim)
        self.instance = instance or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.metrics = Metrics()
        self.ready = asyncio.Event()
        self.server: Site | None = None
        self.status_server: Site | None = None
        self.logs_server: Site | None = None
        self.ledger = Ledger()
        self.capacities = Capacities(ledger=self.ledger, kind=self.kind,
                                     origin=config.mirror.origin)
        self.leading = False
        self.term: LeaderTerm | None = None
        """The current (or last) leadership term; None while this replica never led."""
        self._manager_kubeconfig = manager_kubeconfig

    @property
    def registry(self) -> WorkerRegistry | None:
        return self.term.registry if self.term is not None else None

    @property
    def jobs(self) -> JobsController | None:
        return self.term.jobs if self.term is not None else None

    def status_view(self, offset: int = 0, limit: int = 50) -> StatusView:
        """The status page's view from the caches (the jobs this dispatcher claims); what
        `dispatcher jobs` and `dispatcher cluster list` would show from the objects."""
        return self.status_view_build(offset, limit)()

    def placements(self) -> dict[str, str]:
        """Job UID -> worker of every placed job, from the Placement records' cache."""
        return self.term.placements() if self.term is not None else {}

    def status_view_build(self, offset: int = 0, limit: int = 50) -> Callable[[], StatusView]:
        if self.term is None:
            return functools.partial(build_view, workers=[], jobs=[], claim=self.claim,
                                     kind=self.kind, offset=offset, limit=limit)
        return self.term.status_view_build(offset, limit)

    async def _manager_client(self) -> ClusterClient:
        settings = client_settings(self.config)
        observer = self.metrics.observe_request
        if self._manager_kubeconfig is not None:
            return await ClusterClient.from_kubeconfig(
                name="manager", kubeconfig=self._manager_kubeconfig, settings=settings,
                observer=observer, clock=self.clock)
        if self.config.manager_kubeconfig is not None:
            import yaml

            kubeconfig = yaml.safe_load(self.config.manager_kubeconfig.read_text())
            return await ClusterClient.from_kubeconfig(
                name="manager", kubeconfig=kubeconfig, settings=settings, observer=observer,
                clock=self.clock)
        return await ClusterClient.in_cluster(name="manager", settings=settings,
                                              observer=observer, clock=self.clock)

    async def run(self) -> None:
        """Serve health and metrics; work (alone, or while holding the Lease)."""
        cfg = self.config
        manager = await self._manager_client()
        def role() -> str:
            return "leader" if self.leading else "standby"
        self.server = health_site(registry=self.metrics.registry, host=cfg.server.host,
                                  port=cfg.server.port, ready=self.ready.is_set, role=role)
        await self.server.start()
        log.info("serving /metrics, /healthz, /readyz on %s:%d", cfg.server.host,
                 self.server.port)
        if cfg.server.logs:
            self.logs_server = LogsEndpoint(manager=manager, logs=self._job_logs).site(
                host=cfg.server.logs_host, port=cfg.server.logs_port)
            await self.logs_server.start()
            log.info("serving the jobs' logs on http://%s:%d/logs/", cfg.server.logs_host,
                     self.logs_server.port)
        if cfg.server.status_page:
            self.status_server = status_site(
                provider=self.status_view_build, role=role, clock=self.clock,
                host=cfg.server.status_host, port=cfg.server.status_port,
                logs_port=self.logs_server.port if self.logs_server is not None else None)
            await self.status_server.start()
            log.info("serving the status page on http://%s:%d/", cfg.server.status_host,
                     self.status_server.port)
        try:
            if not cfg.leader_election.enabled:
                self._set_leading(True)
                await self._work(manager)
                return
            election = cfg.leader_election
            await lead(
                api=manager.api, namespace=cfg.namespace, name=election.lease_name,
                identity=self.instance, lease_duration=election.lease_duration_seconds,
                renew_deadline=election.renew_deadline_seconds,
                retry_period=election.retry_period_seconds,
                work=lambda: self._work(manager), on_leading=self._set_leading,
            )
        finally:
            for site in (self.logs_server, self.status_server):
                if site is not None:
                    await site.stop()
            await self.server.stop()
            await manager.close()

    def _job_logs(self) -> JobLogs | None:
        """The logs of the current term, while this replica leads (it has the workers)."""
        return self.term.logs if self.leading and self.term is not None else None

    def _set_leading(self, leading: bool) -> None:
        self.leading = leading
        self.metrics.leader.set(1 if leading else 0)

    async def _work(self, manager: ClusterClient) -> None:
        """One leadership term: caches, workers, ledger, controllers."""
        self.term = LeaderTerm(
            config=self.config, manager=manager, kind=self.kind, claim=self.claim,
            ledger=self.ledger, capacities=self.capacities, metrics=self.metrics,
            clock=self.clock, instance=self.instance)
        await self.term.run(on_ready=self.ready.set)
