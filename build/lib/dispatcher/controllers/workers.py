"""Connections to worker clusters: one client, its watches and one probe per worker.

`WorkerRegistry.apply(specs)` makes the set of connections match the registered workers:
new workers are connected, removed ones closed, and a worker whose kubeconfig changed
gets a new client (credential rotation). Each `WorkerConnection` owns its named tasks:
the watch of this dispatcher's mirrors on the worker (label `dispatcher.trainjob.io/origin`),
the watches of the worker's own runtimes (the copies its trainer runs the mirrors with),
and a health probe every `probe_interval`. The probe and the watch decide whether the
worker is *active*; when it is not, the reason says why (`Unreachable`, `Unauthorized`,
`MissingCRD`, `BadKubeconfig`, ...). A config problem and a network loss are told apart,
and only a network loss starts the lost-worker clock.

The tasks belong to the connection's `TaskOwner`: each is logged and restarted when it
fails (a probe that fails unexpectedly also makes the worker inactive, `ProbeFailed`,
until a probe succeeds), and `stop()` cancels and awaits them all. Every time read and
every wait goes through the injected `Clock`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from dispatcher.api import constants as c
from dispatcher.api.kueue import CLUSTER_QUEUES, WORKLOAD_PRIORITY_CLASSES, WORKLOADS
from dispatcher.api.workercluster import WorkerSpec
from dispatcher.clock import Clock
from dispatcher.controllers.worker_kueue import QueueProblem, WorkerKueue
from dispatcher.kinds import JobKind
from dispatcher.kube.client import ClientSettings, ClusterClient, RequestObserver
from dispatcher.kube.informer import EventHandler, Informer, InformerSettings
from dispatcher.kube.resource import Resource, ResourceKind, message_of, status_of
from dispatcher.supervision import Body, TaskOwner

log = logging.getLogger(__name__)

ChangeHandler = Callable[["WorkerConnection"], None]
WorkloadHandler = Callable[[str, str], None]
"""(worker, job key): a Workload of that job changed on that worker."""
RuntimeHandler = Callable[[str, str, dict[str, object]], None]
"""(worker, event type, runtime): a runtime on that worker came, changed or went."""
_RESTART_SECONDS = 1.0
"""How long a failed watch or probe task waits before it is started again."""


def _reason_for(error: BaseException, kind: ResourceKind) -> tuple[str, str]:
    status = status_of(error)
    if status in (401, 403):
        return c.REASON_UNAUTHORIZED, f"the worker refused the credentials (HTTP {status})"
    if status == 404:
        return c.REASON_MISSING_CRD, (
            f"the worker does not serve {kind.api_version} {kind.plural}: install their CRDs")
    if status:
        return c.REASON_UNREACHABLE, f"HTTP {status}: {message_of(error)}"
    if isinstance(error, TimeoutError):
        return c.REASON_UNREACHABLE, "the worker's API server did not answer in time"
    return c.REASON_UNREACHABLE, f"cannot reach the worker's API server ({type(error).__name__})"


@dataclass(frozen=True)
class ConnectionOptions:
    """What every worker connection shares: limits, origin label, probe period, clock,
    callbacks."""

    client_settings: ClientSettings
    informer_settings: InformerSettings
    kind: JobKind
    origin: str
    probe_interval: float
    on_change: ChangeHandler
    observer: RequestObserver
    clock: Clock
    on_workload: WorkloadHandler = lambda worker, key: None
    on_runtime: RuntimeHandler = lambda worker, event_type, runtime: None


class WorkerConnection:
    """One worker: its client, mirror cache, health and lost-since clock."""

    def __init__(
        self,
        *,
        spec: WorkerSpec,
        options: ConnectionOptions,
        on_mirror_event: EventHandler,
        lost_since: float | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.client: ClusterClient | None = None
        self.mirrors: Informer | None = None
        self.runtimes: dict[str, Informer] = {}
        """The worker's own runtimes by kind (what its trainer will run a mirror with)."""
        self.active = False
        self.reason = c.REASON_CONNECTING
        self.message = "connecting"
        self.lost_since: float | None = lost_since
        """Wall-clock time the worker became unreachable; None while reachable."""
        self.last_probe: float | None = None
        self.kueue: WorkerKueue | None = None
        """The worker's Kueue, when the registration names a local or cluster queue."""
        self.collected = False
        """Whether stale mirrors were collected since the worker last became active;
        nothing new is placed on it before."""
        self._options = options
        self._clock = options.clock
        self._on_change = options.on_change
        self._on_mirror_event = on_mirror_event
        self._tasks = TaskOwner(clock=options.clock)
        self._watch_errors: dict[str, Exception | None] = {}
        self._probe_now = asyncio.Event()

    def usable(self) -> bool:
        """Active and synced: safe to place on and to trust its mirror (and Workload)
        caches."""
        return self.active and self._synced()

    def _synced(self) -> bool:
        return (self.mirrors is not None and self.mirrors.synced.is_set()
                and all(r.synced.is_set() for r in self.runtimes.values())
                and (self.kueue is None or self.kueue.synced))

    def _set_state(self, active: bool, reason: str, message: str, *,
                   since: float | None = None) -> None:
        """`since`: when the failure began, if known before now (a probe that timed out
        began failing when it was sent, not when the client gave up on it)."""
        network_loss = not active and reason in (c.REASON_UNREACHABLE, c.REASON_UNAUTHORIZED)
        if active:
            self.lost_since = None
        if active and not self.active:
            self.collected = False
        elif network_loss and self.lost_since is None:
            self.lost_since = since if since is not None else self._clock.time()
        changed = (active, reason, message) != (self.active, self.reason, self.message)
        self.active, self.reason, self.message = active, reason, message
        if changed:
            level = logging.INFO if active else logging.WARNING
            log.log(level, "worker %s: %s (%s)", self.name,
                    "active" if active else "inactive", message,
                    extra={"worker": self.name})
            self.notify()

    def notify(self) -> None:
        """Tell the dispatcher this worker changed; a failing callback is logged, and the
        probe and watch that called it live on."""
        try:
            self._on_change(self)
        except Exception:
            log.exception("worker %s: change callback failed", self.name,
                          extra={"worker": self.name})

    async def start(self) -> None:
        if self.spec.problem is not None:
            self._set_state(False, self.spec.problem.reason, self.spec.problem.message)
            return
        assert self.spec.kubeconfig is not None
        try:
            client = await ClusterClient.from_kubeconfig(
                name=self.name, kubeconfig=self.spec.kubeconfig,
                settings=self._options.client_settings, observer=self._options.observer,
                clock=self._options.clock,
            )
        except Exception as error:
            self._set_state(False, c.REASON_BAD_KUBECONFIG,
                            f"cannot build a client from the kubeconfig ({type(error).__name__})")
            return
        self.open(client)

    def open(self, client: ClusterClient) -> None:
        """Start the watches and the probe over `client`, which the connection now owns."""
        self.client = client
        self.mirrors = Informer(
            Resource(client, self._options.kind.kind),
            label_selector=f"{c.LABEL_ORIGIN}={self._options.origin}",
            settings=self._options.informer_settings,
            on_connection=lambda error: self._on_watch_state("mirrors", error),
            name=f"{self.name}/mirrors", clock=self._options.clock,
        )
        self.mirrors.add_handler(self._on_mirror_event)
        self._supervise("watch-mirrors", self.mirrors.run)
        self._supervise("probe", self._probe_loop)
        for kind_name, resource in self._options.kind.runtime_resources.items():
            runtimes = self.runtimes[kind_name] = Informer(
                Resource(client, resource), settings=self._options.informer_settings,
                on_connection=functools.partial(self._on_watch_state, resource.plural),
                name=f"{self.name}/{resource.plural}", clock=self._options.clock)
            runtimes.add_handler(functools.partial(self._options.on_runtime, self.name))
            self._supervise(f"watch-{resource.plural}", runtimes.run)
        if self.spec.local_queue or self.spec.cluster_queue:
            self.kueue = WorkerKueue(
                client, cluster_queue=self.spec.cluster_queue, worker=self.name,
                settings=self._options.informer_settings, clock=self._options.clock,
                on_connection=lambda error: self._on_watch_state("workloads", error),
                on_news=lambda key: self._options.on_workload(self.name, key))
            self._supervise("watch-workloads", self.kueue.run)

    def _supervise(self, task: str, run: Body) -> None:
        self._tasks.start_once(f"worker/{self.name}/{task}", run,
                               restart_delay=_RESTART_SECONDS)

    def _on_watch_state(self, watch: str, error: Exception | None) -> None:
        self._watch_errors[watch] = error
        if error is not None:
            runtimes = {r.plural: r for r in self._options.kind.runtime_resources.values()}
            kind = (WORKLOADS if watch == "workloads" else runtimes.get(watch)
                    or self._options.kind.kind)
            self._set_state(False, *_reason_for(error, kind))
        self._probe_now.set()

    async def probe(self) -> None:
        """One health check: can we reach the worker and does it serve TrainJobs?"""
        assert self.client is not None
        sent = self.last_probe = self._clock.time()
        try:
            await self.client.request("GET", self._options.kind.probe_path(), verb="probe")
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._set_state(False, *_reason_for(error, self._options.kind.kind), since=sent)
            return
        message = "connected"
        if self.kueue is not None:
            reading = WORKLOAD_PRIORITY_CLASSES
            try:
                changed = await self.kueue.refresh_priority_classes()
                if self.spec.cluster_queue:
                    reading = CLUSTER_QUEUES
                    changed = await self.kueue.refresh_queues() or changed
            except asyncio.CancelledError:
                raise
            except QueueProblem as problem:
                self._set_state(False, problem.reason, str(problem))
                return
            except Exception as error:
                self._set_state(False, *_reason_for(error, reading))
                return
            if changed:
                self.notify()
            uncovered = self.kueue.uncovered(self.spec.quota)
            if uncovered:
                message = (f"connected; ClusterQueue {self.spec.cluster_queue!r} does not "
                           f"cover {', '.join(uncovered)} of the declared quota: jobs that "
                           "need it are not placed here")
        if self._synced() and not any(self._watch_errors.values()):
            self._set_state(True, c.REASON_CONNECTED, message)

    async def _probe_loop(self) -> None:
        """Probe now, then every `probe_interval` or as soon as a watch's state changes.
        A probe that raises makes the worker inactive before its task is restarted: a
        worker whose health is not checked is not offered."""
        try:
            while True:
                await self.probe()
                self._probe_now.clear()
                await self._clock.wait(self._probe_now, self._options.probe_interval)
        except Exception as error:
            self._set_state(False, c.REASON_PROBE_FAILED,
                            f"the health probe failed unexpectedly ({type(error).__name__}: "
                            f"{error}); it is restarted")
            raise

    async def stop(self) -> None:
        """Cancel the tasks and close the client, even when cancelled while waiting."""
        try:
            await self._tasks.close()
        finally:
            client, self.client = self.client, None
            if client is not None:
                await client.close()


class WorkerRegistry:
    """The live connections, by worker name."""

    def __init__(
        self,
        *,
        options: ConnectionOptions,
        on_mirror_event: Callable[[str, str, dict[str, object]], None],
        on_mirrors_reset: Callable[[str], None] = lambda worker: None,
    ) -> None:
        self.workers: dict[str, WorkerConnection] = {}
        self._options = options
        self._on_mirror_event = on_mirror_event
        self._on_mirrors_reset = on_mirrors_reset
        """Called when a worker's mirror cache is dropped (the worker left, or a new
        connection will list its mirrors afresh)."""
        self._lock = asyncio.Lock()

    def get(self, name: str) -> WorkerConnection | None:
        return self.workers.get(name)

    def _connection(self, spec: WorkerSpec, lost_since: float | None) -> WorkerConnection:
        def on_mirror(event_type: str, obj: dict[str, object]) -> None:
            self._on_mirror_event(spec.name, event_type, obj)

        return WorkerConnection(spec=spec, options=self._options, on_mirror_event=on_mirror,
                                lost_since=lost_since)

    async def apply(self, specs: Iterable[WorkerSpec],
                    lost_since: dict[str, float] | None = None) -> None:
        """Connect, reconnect or close workers so the registry matches `specs`."""
        async with self._lock:
            wanted = {spec.name: spec for spec in specs}
            for name in list(self.workers):
                if name not in wanted:
                    connection = self.workers.pop(name)
                    await connection.stop()
                    self._on_mirrors_reset(name)
                    connection.notify()
            for name, spec in wanted.items():
                current = self.workers.get(name)
                if current is not None and (
                    current.spec.connection_fields() == spec.connection_fields()
                ):
                    if current.spec != spec:
                        current.spec = replace(spec)
                        current.notify()
                    continue
                since = current.lost_since if current else (lost_since or {}).get(name)
                if current is not None:
                    await current.stop()
                    self._on_mirrors_reset(name)
                connection = self._connection(spec, since)
                self.workers[name] = connection
                await connection.start()
                connection.notify()

    async def close(self) -> None:
        async with self._lock:
            for connection in self.workers.values():
                await connection.stop()
            self.workers.clear()
