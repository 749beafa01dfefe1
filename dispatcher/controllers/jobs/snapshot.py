"""Everything a decision about one job looks at, read from the caches in one go.

`SnapshotReader.read(key, memories)` gives one of two snapshots:
- `Absent`: no job this dispatcher claims has that key: none is in the cache, or the one
  there is not claimed (kept as `unclaimed`: it may still hold our finalizer, and then,
  with no record, the worker its annotation names and the object of its name there);
- `Claimed`: the manager job and everything its decision needs: its placement record
  (where it is placed: never from anything a user can write on the job), its worker's
  state, its mirror (or the tombstone of one deleted under it), the live copies of the
  job on other workers and what each holds, the mirror's Kueue Workload on a worker
  that runs Kueue, its runtime and demand (computed once per job generation and runtime
  version), and, placed with no mirror yet, the demand its worker's current copy of
  the runtime gives it, its priority, and the scheduler's reservation of, and last word on, it;
  with Kueue on the manager, its `Gate` (what its Workload there allows).
Either may carry a `Leftover`: a record of that name to clean up first (its job gone,
re-created or no longer claimed), with that record's worker and mirror.

Nothing here writes anything, the job's memory included: what is worth keeping (the
demand and the versions it was computed for) is in the snapshot, and the controller
records it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.placement import PlacementRecord
from dispatcher.claim import Claim
from dispatcher.clock import Clock
from dispatcher.config import DispatcherConfig
from dispatcher.controllers.admission.gate import Gate
from dispatcher.controllers.jobs.memory import DemandVersion, JobMemories, JobMemory
from dispatcher.controllers.jobs.priority import NO_PRIORITY, Priority, PriorityCache
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.scheduling import Preemptor, SchedulingLoop, VerdictTimes
from dispatcher.controllers.workers import WorkerConnection, WorkerRegistry
from dispatcher.kinds import JobKind
from dispatcher.kube.informer import Informer
from dispatcher.placement import resources
from dispatcher.placement.ledger import Ledger
from dispatcher.placement.scheduler import Decision
from dispatcher.placement.validation import DemandError, checked_vector_text

JSON = dict[str, Any]


def annotations_of(job: JSON) -> dict[str, str]:
    return job["metadata"].get("annotations") or {}


def holds_finalizer(job: JSON) -> bool:
    return c.FINALIZER in (job["metadata"].get("finalizers") or [])


def uid_of(obj: JSON) -> str:
    return str(obj["metadata"]["uid"])


@dataclass(frozen=True)
class WorkerState:
    name: str
    usable: bool
    lost_for: float | None
    """Seconds since the worker became unreachable; None while it is reachable."""
    draining: bool
    message: str
    local_queue: str = ""
    cluster_queue: str = ""


@dataclass(frozen=True)
class Leftover:
    """A record of this name to clean up first: its job is gone, was re-created, or is
    no longer claimed."""

    record: PlacementRecord
    worker: WorkerState | None = None
    """The record's worker, while it is registered (None when the record places nothing)."""
    mirror: JSON | None = None
    """The record's mirror on that worker, when the worker can be read."""


@dataclass(frozen=True)
class Copy:
    """A live mirror of the job seen on a worker other than the one it is placed on."""

    worker: WorkerState
    mirror: JSON | None
    """The mirror as that worker's cache has it; None where the cache cannot be trusted."""
    holds: dict[str, Fraction] = field(default_factory=dict)
    """What it holds there (`SnapshotReader.held_by`)."""


@dataclass(frozen=True)
class Absent:
    """No job this dispatcher claims has this key."""

    key: str
    now: float
    """Monotonic time of the reading."""
    wall: float = 0.0
    unclaimed: JSON | None = None
    """The job of this key, when there is one the dispatcher does not claim."""
    leftover: Leftover | None = None
    hinted_worker: WorkerState | None = None
    """With no record: the worker the unclaimed job's annotation names, when it holds
    our finalizer (placed by an earlier version): where to look for its mirror."""
    hinted_mirror: JSON | None = None
    """The object of the job's name on `hinted_worker`, when that worker can be read."""


@dataclass(frozen=True)
class Claimed:
    """A job this dispatcher claims, and what its decision looks at."""

    key: str
    now: float
    """Monotonic time of the reading."""
    job: JSON
    wall: float = 0.0
    """Wall-clock time of the reading (to compare with the clusters' timestamps)."""
    record: PlacementRecord | None = None
    """The job's own placement record."""
    leftover: Leftover | None = None
    hinted_worker: WorkerState | None = None
    """With no record: the worker the job's own view (annotation and finalizer) names, as
    an earlier version wrote it: not the truth, only where to look for its mirror."""
    hinted_mirror: JSON | None = None
    """The object of the job's name on `hinted_worker`, when that worker can be read (a
    finished mirror kept there after its record went, or an earlier version's)."""
    elsewhere: tuple[Copy, ...] = ()
    """Live mirrors of the job seen on other workers."""
    booked: bool = False
    """Whether the ledger books the job on `placed_on`."""
    worker: WorkerState | None = None
    """The state of `placed_on`, while it is registered."""
    mirror: JSON | None = None
    tombstone: JSON | None = None
    workload: JSON | None = None
    """The Kueue Workload of the mirror on its worker, when the worker runs Kueue."""
    runtime: JSON | None = None
    runtime_name: str = ""
    demand: dict[str, Fraction] | None = None
    demand_error: DemandError | None = None
    demand_version: DemandVersion | None = None
    """The (generation, runtime version) `demand` was computed for."""
    demand_on: dict[str, dict[str, Fraction]] = field(default_factory=dict)
    """Worker -> the demand its own runtime gives the job, where it differs (pending)."""
    missing_on: dict[str, str] = field(default_factory=dict)
    """Worker -> why its runtime cannot run the job (pending jobs)."""
    demand_there: dict[str, Fraction] | None = None
    """Placed, no mirror yet: the demand the worker's current copy of the runtime gives
    the job (what the mirror's pods would be made from); None when not known."""
    cannot_run_there: str = ""
    """Placed, no mirror yet: why the worker's current copy of the runtime cannot run it."""
    priority: Priority = NO_PRIORITY
    """The job's priority in the queue (pending jobs), and where it comes from."""
    reservation: str | None = None
    verdict: Decision | None = None
    """The scheduler's last word on the job while it waits in the queue."""
    verdict_times: VerdictTimes | None = None
    """When that word was first given, and the job's first of this wait."""
    preempted_by: Preemptor | None = None
    """Placed: the job of higher priority the scheduler takes its room for."""
    gate: Gate | None = None
    """With Kueue on the manager (`admissionCheck.controllerName`): what the job's Workload
    allows, in place of its `suspend`, which is Kueue's; None when standalone."""

    @property
    def uid(self) -> str:
        return uid_of(self.job)

    @property
    def placed_on(self) -> str | None:
        """The worker of the job's placement record."""
        return self.record.worker if self.record is not None and self.record.placed else None


Snapshot = Absent | Claimed


class SnapshotReader:
    def __init__(self, *, config: DispatcherConfig, claim: Claim, kind: JobKind,
                 trainjobs: Informer, records: PlacementRecords,
                 runtimes: dict[str, Informer], registry: WorkerRegistry, ledger: Ledger,
                 scheduling: SchedulingLoop, priorities: PriorityCache,
                 clock: Clock, gates: Callable[[JSON], Gate] | None = None) -> None:
        self._config = config
        self._claim = claim
        self._kind = kind
        self._jobs = trainjobs
        self._records = records
        self._runtimes = runtimes
        self._registry = registry
        self._ledger = ledger
        self._scheduling = scheduling
        self._priorities = priorities
        self._clock = clock
        self._gates = gates
        self._parsed_runtimes: dict[str, tuple[str, Any]] = {}
        self._same_runtimes: dict[tuple[str, str, str, str], tuple[tuple[str, str], bool]] = {}

    def runtime_of(self, job: JSON) -> tuple[str, JSON | None]:
        """("ClusterTrainingRuntime 'name'", the runtime from the caches or None)."""
        ref = self._kind.runtime_ref(job)
        if ref is None:
            return "", None
        kind, key = ref
        informer = self._runtimes.get(kind)
        return f"{kind} {key.rsplit('/', 1)[-1]!r}", informer.get(key) if informer else None

    async def read(self, key: str, memories: JobMemories) -> Snapshot:
        now, wall = self._clock.monotonic(), self._clock.time()
        job = self._jobs.get(key)
        records = self._records.of_job(key)
        if job is None or not self._claim.claims(job):
            hinted = self._hinted(job) if job is not None and not records else None
            return Absent(key=key, now=now, wall=wall, unclaimed=job,
                          leftover=self._leftover(key, records[0] if records else None),
                          hinted_worker=self._worker_state(hinted) if hinted else None,
                          hinted_mirror=self._object_at(hinted, key) if hinted else None)
        uid = uid_of(job)
        record = next((r for r in records if r.uid == uid), None)
        leftover = self._leftover(key, next((r for r in records if r is not record), None))
        memory = memories.get(uid)
        placed_on = record.worker if record is not None and record.placed else None
        runtime_name, runtime = self.runtime_of(job)
        version, demand, error = self.demand(job, runtime, memory)
        connection = self._registry.get(placed_on) if placed_on else None
        mirror = workload = None
        if connection is not None and connection.usable():
            assert connection.mirrors is not None
            mirror = connection.mirrors.get(key)
            if mirror is not None and connection.kueue is not None:
                workload = connection.kueue.workload_of(mirror["metadata"].get("uid", ""))
        tombstone = None
        if memory is not None and memory.tombstone and memory.tombstone[0] == placed_on:
            tombstone = memory.tombstone[1]
        there = (self._demand_there(connection, job, runtime, demand)
                 if connection is not None and connection.usable() and mirror is None
                 else None)
        booking = self._ledger.get(uid)
        pending = placed_on is None and not job["metadata"].get("deletionTimestamp")
        demand_on, missing_on = (self._on_workers(job, runtime, demand)
                                 if pending and runtime is not None and demand else ({}, {}))
        hinted = self._hinted(job) if record is None else None
        return Claimed(
            key=key, now=now, wall=wall, job=job, record=record, leftover=leftover,
            hinted_worker=self._worker_state(hinted) if hinted else None,
            hinted_mirror=self._object_at(hinted, key) if hinted else None,
            elsewhere=self._copies(key, uid, placed_on),
            booked=booking is not None and booking.worker == placed_on,
            worker=self._worker_state(connection) if connection else None,
            mirror=mirror, tombstone=tombstone, workload=workload, runtime=runtime,
            runtime_name=runtime_name, demand=demand, demand_error=error,
            demand_version=version, demand_on=demand_on, missing_on=missing_on,
            demand_there=there if isinstance(there, dict) else None,
            cannot_run_there=there if isinstance(there, str) else "",
            priority=await self._priority(job, runtime) if pending and demand else NO_PRIORITY,
            reservation=self._scheduling.reservation(uid),
            verdict=self._scheduling.decisions.get(uid) if pending else None,
            verdict_times=self._scheduling.verdict_times.get(uid) if pending else None,
            preempted_by=(self._scheduling.preemptor_of(uid, placed_on)
                          if placed_on is not None else None),
            gate=self._gates(job) if self._gates is not None else None,
        )

    async def _priority(self, job: JSON, runtime: JSON | None) -> Priority:
        pods_class = (self._kind.pods_priority_class(self._parsed(runtime))
                      if runtime is not None else "")
        return await self._priorities.priority(job, pods_class=pods_class)

    def _hinted(self, job: JSON) -> WorkerConnection | None:
        """The registered worker a job's annotation names, when the job holds our
        finalizer (an earlier version's placement): only where to look for its mirror."""
        if not holds_finalizer(job):
            return None
        return self._registry.get(annotations_of(job).get(c.ANNOTATION_CLUSTER, ""))

    @staticmethod
    def _object_at(connection: WorkerConnection, key: str) -> JSON | None:
        """The object named `key` in a worker's cache, when the cache can be trusted
        (whether it is our mirror is `decide`'s to judge)."""
        if not connection.usable():
            return None
        assert connection.mirrors is not None
        return connection.mirrors.get(key)

    def _copies(self, key: str, uid: str, placed_on: str | None) -> tuple[Copy, ...]:
        copies = []
        for name in self._ledger.mirrors_of(uid):
            other = self._registry.get(name)
            if name == placed_on or other is None:
                continue
            mirror = self._mirror_of(other, key, uid)
            copies.append(Copy(worker=self._worker_state(other), mirror=mirror,
                               holds=self.held_by(mirror, uid) if mirror is not None else {}))
        return tuple(copies)

    def held_by(self, mirror: JSON, uid: str) -> dict[str, Fraction]:
        """What a live mirror holds: the demand it was created with, else what its spec
        needs with the manager's runtime of that name, else its job's booking."""
        text = annotations_of(mirror).get(c.ANNOTATION_DEMAND)
        if text:
            try:
                return checked_vector_text(text, path=f"annotation {c.ANNOTATION_DEMAND}")
            except DemandError:
                pass
        _, runtime = self.runtime_of(mirror)
        _, computed, _ = self.demand(mirror, runtime, None)
        booking = self._ledger.get(uid)
        return resources.maximum([computed or {}, booking.demand if booking else {}])

    def _on_workers(self, job: JSON, manager_runtime: JSON, demand: dict[str, Fraction]
                    ) -> tuple[dict[str, dict[str, Fraction]], dict[str, str]]:
        """What each worker's own copy of the job's runtime makes of it: the demand
        where it differs from the manager's, or why the worker cannot run it."""
        demand_on: dict[str, dict[str, Fraction]] = {}
        missing_on: dict[str, str] = {}
        for connection in self._registry.workers.values():
            there = self._demand_there(connection, job, manager_runtime, demand)
            if isinstance(there, str):
                missing_on[connection.name] = there
            elif there is not None and there != demand:
                demand_on[connection.name] = there
        return demand_on, missing_on

    def _demand_there(self, connection: WorkerConnection, job: JSON,
                      manager_runtime: JSON | None, demand: dict[str, Fraction] | None
                      ) -> dict[str, Fraction] | str | None:
        """The job's demand with the worker's own copy of its runtime (the manager's
        `demand` when the copy has the manager's spec), why the worker cannot run it,
        or None when its runtimes are not read yet (or the job needs none)."""
        ref = self._kind.runtime_ref(job)
        informer = connection.runtimes.get(ref[0]) if ref else None
        if ref is None or informer is None or not informer.synced.is_set():
            return None  # not read yet: the worker is not offered until it is
        kind_name, key = ref
        runtime = informer.get(key)
        if (runtime is not None and demand is not None and manager_runtime is not None
                and self._same_runtime(connection.name, runtime, manager_runtime)):
            return demand  # the common case, once per job and worker: nothing more to build
        named = f"{kind_name} {key.rsplit('/', 1)[-1]!r}"
        if runtime is None:
            return f"has no {named}"
        try:
            parsed = self._parsed(runtime, cluster=connection.name)
            return self._kind.demand(job, runtime, parsed,
                                     mode=self._config.placement.demand_mode)
        except DemandError as error:
            return f"cannot run it with its {named}: {error}"

    def _same_runtime(self, worker: str, there: JSON, here: JSON) -> bool:
        """Whether a worker's copy of a runtime has the manager's spec (compared once per
        version of each)."""
        key = (worker, str(there.get("kind")), there["metadata"].get("namespace", ""),
               there["metadata"]["name"])
        versions = (there["metadata"].get("resourceVersion", ""),
                    here["metadata"].get("resourceVersion", ""))
        cached = self._same_runtimes.get(key)
        if cached is None or cached[0] != versions:
            cached = (versions, there.get("spec") == here.get("spec"))
            self._same_runtimes[key] = cached
        return cached[1]

    def _mirror_of(self, connection: WorkerConnection, key: str, uid: str) -> JSON | None:
        """Our mirror of job `uid` in the worker's cache, when the cache can be trusted."""
        if not connection.usable():
            return None
        assert connection.mirrors is not None
        found = connection.mirrors.get(key)
        if found is not None and self._kind.is_ours(
                found, manager_uid=uid, origin=self._config.mirror.origin):
            return found
        return None

    def _leftover(self, key: str, record: PlacementRecord | None) -> Leftover | None:
        if record is None:
            return None
        connection = self._registry.get(record.worker) if record.placed else None
        if connection is None:
            return Leftover(record)
        return Leftover(record, worker=self._worker_state(connection),
                        mirror=self._mirror_of(connection, key, record.uid))

    def _worker_state(self, worker: WorkerConnection) -> WorkerState:
        lost_for = (self._clock.time() - worker.lost_since
                    if worker.lost_since is not None else None)
        return WorkerState(name=worker.name, usable=worker.usable(), lost_for=lost_for,
                           draining=worker.spec.drain, message=worker.message,
                           local_queue=worker.spec.local_queue,
                           cluster_queue=worker.spec.cluster_queue)

    def demand(self, job: JSON, runtime: JSON | None, memory: JobMemory | None
               ) -> tuple[DemandVersion | None, dict[str, Fraction] | None, DemandError | None]:
        """The job's demand and the (generation, runtime version) it is for; the one in
        `memory` when it was computed for the same versions."""
        if runtime is None:
            return None, None, None
        version = (int(job["metadata"].get("generation", 0)),
                   str(runtime["metadata"].get("resourceVersion", "")))
        if memory is not None and memory.demand is not None and memory.demand[0] == version:
            return version, memory.demand[1], None
        try:
            demand = self._kind.demand(job, runtime, self._parsed(runtime),
                                       mode=self._config.placement.demand_mode)
        except DemandError as error:
            return version, None, error
        return version, demand, None

    def _parsed(self, runtime: JSON, *, cluster: str = "") -> Any:
        """The runtime (of the manager, or of worker `cluster`) parsed once per version of
        it (a DemandError when it cannot be)."""
        metadata = runtime["metadata"]
        key = (f"{cluster}/{runtime.get('kind')}/{metadata.get('namespace', '')}/"
               f"{metadata['name']}")
        version = metadata.get("resourceVersion", "")
        cached = self._parsed_runtimes.get(key)
        if cached is None or cached[0] != version:
            cached = (version, self._kind.parse_runtime(runtime))
            self._parsed_runtimes[key] = cached
        return cached[1]
