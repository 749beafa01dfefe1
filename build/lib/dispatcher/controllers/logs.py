"""The logs of a job's pods, read on the worker where it runs or ran.

`JobLogs.lines(query)` finds the job's mirror (on the worker its Placement record
names, else on any reachable worker where a mirror proves to be this job's: a finished
one kept for `mirror.retainFinishedSeconds` after its record went), the pods the mirror
made (`JobKind.pods_of`: never another object's pods), and reads each container's log
through the dispatcher's own credentials for that worker. Who may read them is the
caller's business (the logs endpoint asks the manager first). With `follow`, the logs
of all the pods are read at once and their lines interleaved as they come; otherwise
one after the other, in the order of the pods' replicated job and node rank. With more
than one container, each line starts with `[pod/container]`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from dispatcher.claim import Claim
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.workers import WorkerConnection, WorkerRegistry
from dispatcher.kinds import JobKind
from dispatcher.kube.informer import Informer
from dispatcher.kube.pod_logs import LogOptions, log_lines
from dispatcher.kube.resource import PODS, Resource, message_of

JSON = dict[str, Any]
_END = object()


class LogsUnavailable(Exception):
    """Why there are no logs to read, with the HTTP status that says it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LogQuery:
    namespace: str
    name: str
    container: str | None = None
    replicated_job: str | None = None
    node_rank: int | None = None
    options: LogOptions = field(default_factory=LogOptions)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Source:
    """One container of one of the job's pods."""

    pod: str
    container: str
    replicated_job: str
    node_rank: int

    @property
    def prefix(self) -> str:
        return f"[{self.pod}/{self.container}] "


@dataclass(frozen=True)
class Located:
    worker: WorkerConnection
    mirror: JSON
    sources: list[Source]


class JobLogs:
    def __init__(self, *, trainjobs: Informer, records: PlacementRecords,
                 registry: WorkerRegistry, claim: Claim, kind: JobKind, origin: str) -> None:
        self._jobs = trainjobs
        self._records = records
        self._registry = registry
        self._claim = claim
        self._kind = kind
        self._origin = origin

    def mirror(self, key: str) -> tuple[WorkerConnection, JSON]:
        """The worker and the mirror of claimed job `key`; LogsUnavailable when none can
        be read now."""
        job = self._jobs.get(key)
        if job is None:
            raise LogsUnavailable(404, f"no TrainJob {key} on the manager")
        if not self._claim.claims(job):
            raise LogsUnavailable(404, f"TrainJob {key} is not dispatched by this dispatcher "
                                       f"({self._claim.refusal(job)})")
        uid = job["metadata"]["uid"]
        placed = next((r.worker for r in self._records.of_job(key)
                       if r.uid == uid and r.placed), None)
        names = [placed] if placed else sorted(self._registry.workers)
        for name in names:
            worker = self._registry.get(name)
            if worker is None:
                continue
            if not worker.usable():
                if name == placed:
                    raise LogsUnavailable(503, f"worker {name}, where {key} runs, cannot be "
                                               f"reached now: {worker.message}")
                continue
            assert worker.mirrors is not None
            mirror = worker.mirrors.get(key)
            if mirror is not None and self._kind.is_ours(mirror, manager_uid=uid,
                                                         origin=self._origin):
                return worker, mirror
        where = f"on worker {placed}" if placed else "on any reachable worker"
        raise LogsUnavailable(404, f"no mirror of {key} {where}: it has not been placed, "
                                   "or its mirror was deleted (a finished one is kept for "
                                   "mirror.retainFinishedSeconds)")

    async def locate(self, query: LogQuery) -> Located:
        """The job's mirror and the containers whose logs the query asks for."""
        worker, mirror = self.mirror(query.key)
        assert worker.client is not None
        owner = await Resource(worker.client, self._kind.pods_owner).get(
            mirror["metadata"]["name"], namespace=query.namespace)
        listed = await Resource(worker.client, PODS).list(
            namespace=query.namespace,
            label_selector=self._kind.pods_selector(mirror, replicated_job=query.replicated_job,
                                                    node_rank=query.node_rank))
        pods = self._kind.pods_of(mirror, owner, listed["items"])
        if not pods:
            which = "".join([f", replicated job {query.replicated_job}"
                             if query.replicated_job is not None else "",
                             f", node rank {query.node_rank}"
                             if query.node_rank is not None else ""])
            raise LogsUnavailable(404, f"no pods of {query.key}{which} on worker "
                                       f"{worker.name} (yet)")
        sources = []
        for pod in pods:
            replicated_job, rank = self._kind.pod_place(pod)
            for container in _containers(pod):
                if query.container in (None, container):
                    sources.append(Source(pod["metadata"]["name"], container,
                                          replicated_job, rank))
        if not sources:
            names = sorted({c for pod in pods for c in _containers(pod)})
            raise LogsUnavailable(404, f"no container {query.container} in the pods of "
                                       f"{query.key}; theirs: {', '.join(names)}")
        return Located(worker=worker, mirror=mirror, sources=sources)

    async def lines(self, query: LogQuery, located: Located) -> AsyncGenerator[str, None]:
        """The lines of the located containers' logs."""
        prefixed = len(located.sources) > 1
        if not query.options.follow:
            for source in located.sources:
                async for line in self._read(located.worker, query, source):
                    yield (source.prefix if prefixed else "") + line
            return
        async for line in self._interleaved(located.worker, query, located.sources,
                                            prefixed=prefixed):
            yield line

    async def _interleaved(self, worker: WorkerConnection, query: LogQuery,
                           sources: list[Source], *, prefixed: bool) -> AsyncIterator[str]:
        lines: asyncio.Queue[object] = asyncio.Queue(maxsize=1000)

        async def pump(source: Source) -> None:
            try:
                async for line in self._read(worker, query, source):
                    await lines.put((source.prefix if prefixed else "") + line)
            finally:
                await lines.put(_END)

        tasks = [asyncio.create_task(pump(source), name=f"logs {source.pod}/{source.container}")
                 for source in sources]
        try:
            running = len(tasks)
            while running:
                item = await lines.get()
                if item is _END:
                    running -= 1
                else:
                    yield str(item)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task

    async def _read(self, worker: WorkerConnection, query: LogQuery,
                    source: Source) -> AsyncIterator[str]:
        """One container's lines; a log the worker cannot give is one line saying why."""
        assert worker.client is not None
        try:
            async for line in log_lines(worker.client, namespace=query.namespace,
                                        pod=source.pod, container=source.container,
                                        options=query.options):
                yield line
        except Exception as error:
            yield f"(no log from worker {worker.name}: {message_of(error)})"


def _containers(pod: JSON) -> list[str]:
    """The names of the pod's (main, not init) containers."""
    return [container["name"] for container in (pod.get("spec") or {}).get("containers") or []]
