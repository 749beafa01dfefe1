"""Wiring: configuration -> clients -> caches -> controllers, in one asyncio.TaskGroup.

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

from dispatcher.api.placement import PLACEMENTS
from dispatcher.api.trainer import CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES
from dispatcher.api.workercluster import WORKER_CLUSTERS
from dispatcher.clock import Clock, SystemClock
from dispatcher.config import DispatcherConfig
from dispatcher.controllers.gc import GarbageCollector
from dispatcher.controllers.jobs import JobsController
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.controllers.workerclusters import WorkerClustersController
from dispatcher.controllers.workers import ConnectionOptions, WorkerConnection, WorkerRegistry
from dispatcher.kinds.trainjob import CLUSTER_RUNTIME, NAMESPACED_RUNTIME, TrainJobKind
from dispatcher.kube.client import ClientSettings, ClusterClient
from dispatcher.kube.informer import Informer, InformerSettings
from dispatcher.kube.leader import lead
from dispatcher.kube.resource import SECRETS, Resource
from dispatcher.kube.workqueue import Result, WorkQueue
from dispatcher.observability.events import EventRecorder
from dispatcher.observability.metrics import Metrics
from dispatcher.observability.server import HealthServer
from dispatcher.observability.statusview import (
    StatusView,
    WorkerRow,
    build_view,
    worker_row,
)
from dispatcher.placement.capacity import Capacity, OurJob, capacity, queue_room
from dispatcher.placement.ledger import Ledger
from dispatcher.placement.scheduler import Decision, WorkerView
from dispatcher.supervision import Body, TaskOwner, guarded

log = logging.getLogger(__name__)
_GAUGE_INTERVAL_SECONDS = 2.0
_RESTART_SECONDS = 1.0


def _unavailable(worker: WorkerConnection) -> str:
    if worker.spec.drain:
        return "draining"
    if not worker.usable():
        return f"{worker.reason}: {worker.message}"
    return "" if worker.collected else "collecting stale mirrors"


class Dispatcher:
    """One dispatcher process; `run()` until cancelled."""

    def __init__(self, config: DispatcherConfig, *,
                 manager_kubeconfig: dict[str, Any] | None = None,
                 instance: str | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.kind = TrainJobKind()
        self.instance = instance or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.metrics = Metrics()
        self.ready = asyncio.Event()
        self.server: HealthServer | None = None
        self.jobs: JobsController | None = None
        self.registry: WorkerRegistry | None = None
        self.ledger = Ledger()
        self.leading = False
        self._manager_kubeconfig = manager_kubeconfig
        self._gc: GarbageCollector | None = None
        self._worker_clusters: WorkerClustersController | None = None
        self._scheduling: SchedulingLoop | None = None
        self._tasks = TaskOwner(clock=self.clock)
        """Tasks started from callbacks: garbage collection of a (re)connected worker."""
        self._events: EventRecorder | None = None

    async def _manager_client(self) -> ClusterClient:
        settings = self._client_settings()
        observer = self.metrics.observe_request
        if self._manager_kubeconfig is not None:
            return await ClusterClient.from_kubeconfig(
                name="manager", kubeconfig=self._manager_kubeconfig, settings=settings,
                observer=observer)
        if self.config.manager_kubeconfig is not None:
            import yaml

            kubeconfig = yaml.safe_load(self.config.manager_kubeconfig.read_text())
            return await ClusterClient.from_kubeconfig(
                name="manager", kubeconfig=kubeconfig, settings=settings, observer=observer)
        return await ClusterClient.in_cluster(name="manager", settings=settings,
                                              observer=observer)

    def _client_settings(self) -> ClientSettings:
        cfg = self.config.client
        return ClientSettings(qps=cfg.qps, burst=cfg.burst, timeout_seconds=cfg.timeout_seconds)

    def capacity_of(self, worker: WorkerConnection) -> Capacity:
        """The worker's quota, what we and others use of it, and what is free."""
        booked = self.ledger.used(worker.name)
        kueue = worker.kueue
        queue = kueue.queues.get(kueue.cluster_queue) if kueue is not None else None
        if kueue is None or queue is None:
            return capacity(declared=worker.spec.quota, booked=booked)
        ours = []
        for holding in self.ledger.holdings(worker.name):
            mirror = worker.mirrors.get(holding.key) if worker.mirrors is not None else None
            reservation = None
            if mirror is not None and self.kind.is_ours(
                    mirror, manager_uid=holding.uid, origin=self.config.mirror.origin):
                reservation = kueue.reservation_of(mirror["metadata"].get("uid", ""))
            ours.append(OurJob(booked=holding.demand, reservation=reservation))
        room = queue_room(queue, kueue.queues, kueue.reserved, ours)
        return capacity(declared=worker.spec.quota, booked=booked, room=room)

    def _worker_views(self) -> list[WorkerView]:
        assert self.registry is not None
        views = []
        for worker in self.registry.workers.values():
            spec = worker.spec
            room = self.capacity_of(worker)
            views.append(WorkerView(
                name=worker.name, quota=room.ceiling, used=room.scheduler_used,
                labels=spec.labels,
                active=worker.usable() and worker.collected,
                cordoned=spec.cordoned or spec.drain, unavailable=_unavailable(worker),
                priority_classes=worker.kueue.priority_classes if worker.kueue else None,
            ))
        return views

    def status_view(self, offset: int = 0, limit: int = 50) -> StatusView:
        """The status page's view from the caches (the jobs this dispatcher claims); what
        `dispatcher jobs` and `dispatcher cluster list` would show from the objects."""
        return self.status_view_build(offset, limit)()

    def status_view_build(self, offset: int = 0, limit: int = 50) -> Callable[[], StatusView]:
        """`status_view` in two steps: its inputs taken now, from the caches, and the build
        returned to run later, in a thread. The cached objects are replaced on change,
        never changed in place, so the build sees a consistent set."""
        workers: list[WorkerRow] = []
        jobs: list[dict[str, Any]] = []
        priorities: dict[str, int] = {}
        if self.registry is not None and self._worker_clusters is not None:
            crd = self._worker_clusters.worker_clusters
            for worker in self.registry.workers.values():
                obj = (crd.get(worker.name) if crd else None) or {}
                status = self._worker_clusters.desired_status(obj, worker)
                workers.append(worker_row(worker.name, {"cordoned": worker.spec.cordoned,
                                                        "drain": worker.spec.drain}, status))
        if self.jobs is not None and self._scheduling is not None:
            jobs = [j for j in self.jobs.trainjobs.store.values() if self.jobs.claimed(j)]
            priorities = {p.key: p.priority for p in self._scheduling.pending.values()}
        return functools.partial(
            build_view, workers=workers, jobs=jobs, managed_by=self.config.claim.managed_by,
            priorities=priorities, events=list(self._events.recent) if self._events else [],
            offset=offset, limit=limit)

    def _on_worker_change(self, worker: WorkerConnection) -> None:
        assert self.jobs is not None and self._worker_clusters is not None
        self.jobs.on_worker_change(worker)
        self._worker_clusters.trigger()
        self.metrics.worker_active.labels(worker.name).set(1 if worker.active else 0)
        if worker.usable() and not worker.collected:
            self._tasks.start_once(f"worker/{worker.name}/gc-on-connect",
                                   lambda: self._collect_then_open(worker))

    def _on_mirrors_reset(self, worker: str) -> None:
        assert self._scheduling is not None
        self.ledger.forget_mirrors(worker)
        self._scheduling.trigger()

    async def _collect_then_open(self, worker: WorkerConnection) -> None:
        """Collect the worker's stale mirrors, then offer it to the scheduler."""
        assert self._gc is not None and self._scheduling is not None
        try:
            await self._gc.collect(worker)
        except Exception as error:
            log.warning("collecting stale mirrors on %s failed: %s", worker.name, error,
                        extra={"worker": worker.name})
            return
        worker.collected = True
        self._scheduling.trigger()

    def _on_mirror_event(self, worker: str, event_type: str, obj: dict[str, Any]) -> None:
        assert self.jobs is not None
        self.jobs.on_mirror_event(worker, event_type, obj)

    def _on_workload_news(self, worker: str, key: str) -> None:
        assert self.jobs is not None
        self.jobs.on_workload_news(worker, key)

    def _on_worker_runtime(self, worker: str, event_type: str, obj: dict[str, Any]) -> None:
        """A runtime came, changed or went on a worker: what its pending jobs need there
        (or whether they can run there at all) may have changed."""
        assert self.jobs is not None
        self.jobs.on_runtime_event(event_type, obj)

    def _on_decision(self, decision: Decision) -> None:
        assert self.jobs is not None
        self.jobs.on_decision(decision.key, placed=decision.worker is not None)

    def _refresh_gauges(self) -> None:
        assert self.registry is not None and self.jobs is not None
        assert self._scheduling is not None
        m = self.metrics
        m.pending_jobs.set(len(self._scheduling.pending))
        m.jobs.clear()
        m.jobs.labels("pending", "").set(len(self._scheduling.pending))
        for worker in self.registry.workers.values():
            bookings = self.ledger.jobs_on(worker.name)
            running = 0
            for booking in bookings:
                job = self.jobs.trainjobs.get(booking.key)
                status = (job or {}).get("status") or {}
                if any(js.get("active") for js in status.get("jobsStatus") or []):
                    running += 1
            m.jobs.labels("placed", worker.name).set(len(bookings))
            m.jobs.labels("running", worker.name).set(running)
            m.worker_active.labels(worker.name).set(1 if worker.usable() else 0)
            room = self.capacity_of(worker)
            quota, free = room.quota or {}, room.free or {}
            ours, others = room.used_by_us, room.used_by_others
            for name in set(quota) | set(ours) | set(others):
                m.worker_used.labels(worker.name, name).set(float(ours.get(name, 0)))
                m.worker_used_by_others.labels(worker.name, name).set(
                    float(others.get(name, 0)))
                if name in quota:
                    m.worker_quota.labels(worker.name, name).set(float(quota[name]))
                    m.worker_free.labels(worker.name, name).set(float(free.get(name, 0)))
            if worker.mirrors is not None:
                m.watch_restarts.labels(worker.name).set(worker.mirrors.restarts)
        m.queue_depth.set(len(self.jobs.queue))
        m.jobs_by_reason.clear()
        for reason, count in self.jobs.reasons().items():
            m.jobs_by_reason.labels(reason).set(count)

    async def _gauges(self) -> None:
        while True:
            try:
                self._refresh_gauges()
            except Exception:
                log.exception("refreshing gauges failed")
            await self.clock.sleep(_GAUGE_INTERVAL_SECONDS)

    def _guard(self, group: asyncio.TaskGroup, name: str, body: Body) -> None:
        """Run `body` in `group` as task `name`, logged and restarted whenever it ends."""
        group.create_task(guarded(name, body, clock=self.clock, restart_delay=_RESTART_SECONDS),
                          name=name)

    async def _start_when_synced(self, informers: list[Informer], queue: WorkQueue) -> None:
        """Sync caches, connect workers, rebuild the ledger; then reconcile (forever)."""
        assert self.jobs is not None and self._scheduling is not None
        assert self._worker_clusters is not None
        await asyncio.gather(*(i.synced.wait() for i in informers))
        await self._worker_clusters.sync()
        booked = self.jobs.rebuild_ledger()
        log.info("caches synced; ledger rebuilt with %d placed jobs", booked)
        for key in [*self.jobs.trainjobs.store, *(r.key for r in self.jobs.records.all())]:
            self.jobs.queue.add(key)
        self._scheduling.ready.set()
        self.ready.set()
        await queue.run_workers(self._reconcile, workers=self.config.reconcile_workers)

    async def _reconcile(self, key: str) -> Result:
        assert self.jobs is not None
        try:
            result = await self.jobs.reconcile(key)
        except Exception:
            self.metrics.reconciles.labels("error").inc()
            raise
        self.metrics.reconciles.labels("done" if result.requeue_after is None
                                       else "requeue").inc()
        return result

    async def run(self) -> None:
        """Serve health and metrics; work (alone, or while holding the Lease)."""
        cfg = self.config
        manager = await self._manager_client()
        status = self.status_view_build if cfg.server.status_page else None
        self.server = HealthServer(registry=self.metrics.registry, host=cfg.server.host,
                                   port=cfg.server.port, ready=self.ready.is_set,
                                   role=lambda: "leader" if self.leading else "standby",
                                   clock=self.clock, status=status)
        await self.server.start()
        log.info("serving /metrics, /healthz, /readyz on %s:%d", cfg.server.host,
                 self.server.port)
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
            await self.server.stop()
            await manager.close()

    def _set_leading(self, leading: bool) -> None:
        self.leading = leading
        self.metrics.leader.set(1 if leading else 0)

    async def _work(self, manager: ClusterClient) -> None:
        """Everything a leader does: caches, workers, ledger, controllers."""
        cfg = self.config
        informer_settings = InformerSettings()
        kind = self.kind
        queue = WorkQueue(name="trainjobs", clock=self.clock)
        trainjobs = Informer(Resource(manager, kind.kind), settings=informer_settings,
                             name="manager/trainjobs")
        cluster_runtimes = Informer(Resource(manager, CLUSTER_TRAINING_RUNTIMES),
                                    settings=informer_settings,
                                    name="manager/clustertrainingruntimes")
        runtimes = Informer(Resource(manager, TRAINING_RUNTIMES), settings=informer_settings,
                            name="manager/trainingruntimes")
        placements = Informer(Resource(manager, PLACEMENTS), namespace=cfg.namespace,
                              settings=informer_settings, name="manager/placements")
        records = PlacementRecords(placements)
        informers = [trainjobs, cluster_runtimes, runtimes, placements]
        worker_clusters = secrets = None
        if cfg.workers.from_crd:
            worker_clusters = Informer(Resource(manager, WORKER_CLUSTERS),
                                       settings=informer_settings, name="manager/workerclusters")
            secrets = Informer(Resource(manager, SECRETS), namespace=cfg.namespace,
                               settings=informer_settings, name="manager/secrets")
            informers += [worker_clusters, secrets]
        self.registry = WorkerRegistry(
            options=ConnectionOptions(
                client_settings=self._client_settings(), informer_settings=informer_settings,
                kind=kind, origin=cfg.mirror.origin,
                probe_interval=cfg.workers.probe_interval_seconds,
                on_change=self._on_worker_change, observer=self.metrics.observe_request,
                clock=self.clock, on_workload=self._on_workload_news,
                on_runtime=self._on_worker_runtime),
            on_mirror_event=self._on_mirror_event, on_mirrors_reset=self._on_mirrors_reset,
        )
        events = self._events = EventRecorder(manager, instance=self.instance, clock=self.clock)
        self._scheduling = SchedulingLoop(
            ledger=self.ledger, workers=self._worker_views, policy=cfg.placement.policy,
            strategy=cfg.placement.queueing_strategy,
            on_decision=self._on_decision,
        )
        self.jobs = JobsController(
            config=cfg, manager=manager, registry=self.registry, kind=kind, ledger=self.ledger,
            scheduling=self._scheduling, trainjobs=trainjobs, records=records,
            runtimes={CLUSTER_RUNTIME: cluster_runtimes, NAMESPACED_RUNTIME: runtimes},
            queue=queue, events=events, metrics=self.metrics, clock=self.clock,
        )
        self._worker_clusters = WorkerClustersController(
            config=cfg, registry=self.registry, capacity_of=self.capacity_of,
            worker_clusters=worker_clusters, secrets=secrets, clock=self.clock,
            missing_runtimes_of=self._scheduling.missing_runtimes)
        self._gc = GarbageCollector(
            manager=manager, trainjobs=trainjobs, records=records, registry=self.registry,
            kind=kind,
            origin=cfg.mirror.origin, keep_finished=cfg.mirror.keep_finished,
            interval=cfg.gc.interval_seconds, metrics=self.metrics, clock=self.clock)
        trainjobs.add_handler(self.jobs.on_job_event)
        placements.add_handler(self.jobs.on_record_event)
        cluster_runtimes.add_handler(self.jobs.on_runtime_event)
        runtimes.add_handler(self.jobs.on_runtime_event)
        for informer in (worker_clusters, secrets):
            if informer is not None:
                informer.add_handler(self._worker_clusters.trigger)
        try:
            async with asyncio.TaskGroup() as group:
                for informer in informers:
                    self._guard(group, f"informer/{informer.name}", informer.run)
                # Not restarted: a failed start-up (or work queue) fails the leading work.
                group.create_task(self._start_when_synced(informers, queue),
                                  name="reconcile-trainjobs")
                for name, body in (("scheduling", self._scheduling.run),
                                   ("workerclusters", self._worker_clusters.run),
                                   ("garbage-collector", self._gc.run),
                                   ("events", events.run), ("gauges", self._gauges)):
                    self._guard(group, name, body)
        finally:
            await self._tasks.close()
            await self.registry.close()
