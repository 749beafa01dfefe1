"""The AdmissionCheck controller: the manager's Workloads and AdmissionChecks, read and written.

Started by the leader's term only with `admissionCheck.controllerName` set. It owns two
informers on the manager (the AdmissionChecks, and the Workloads, each cached as the
few fields read here) and one work queue, whose keys are `workload/<ns>/<name>` and
`check/<name>`. Its tasks are the informers (run by the term with the others, so the
jobs controller starts only once they are synced) and `run()`, the queue's workers,
until the term ends.

Events only enqueue keys: a Workload's change enqueues it and its job (`on_job`, to the
jobs controller: the job's gate may have opened or closed); an AdmissionCheck's change
enqueues it; a job the jobs controller just reconciled enqueues its Workload
(`job_changed`), and a worker change every check of ours (`workers_changed`).
`reconcile(key)` re-reads the caches (the job's placement, its mirror, whether it
finished, and whether the dispatcher claims it at all, by the one rule of `claim.py`),
asks the jobs controller why the job waits (`explain`: its decision on the job's
snapshot, not the status it wrote), asks `decide.py`, and writes only what differs:
our entry of the Workload's `status.admissionChecks` by server-side apply of the
status (field manager: the controller name, at the Workload's resourceVersion, as
Kueue's own check controllers do), the Active condition of a check by a merge patch of
its status. A 409 is retried with the key's backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api import kueue as k
from dispatcher.claim import Claim
from dispatcher.clock import Clock
from dispatcher.config import CheckReadyWhen
from dispatcher.controllers import status as st
from dispatcher.controllers.admission.decide import (
    CheckUpdate,
    WorkloadJob,
    active_condition,
    active_of,
    check_update,
)
from dispatcher.controllers.admission.gate import Gate, check_of, gate_of
from dispatcher.controllers.jobs.admission import Stage, admission_of
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.workers import WorkerRegistry
from dispatcher.kinds import JobKind
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import DELETED, Informer, InformerSettings, job_key, object_key
from dispatcher.kube.resource import Resource
from dispatcher.kube.workqueue import Result, WorkQueue

log = logging.getLogger(__name__)
JSON = dict[str, Any]
WORKLOAD_KEY = "workload/"
CHECK_KEY = "check/"
_WORKERS = 4


def workload_summary(workload: JSON) -> JSON:
    """What is read of a manager Workload: identity, owner, active, queue, conditions and
    the admission checks (not its pod sets, most of its size)."""
    metadata = workload.get("metadata") or {}
    spec = workload.get("spec") or {}
    status = workload.get("status") or {}
    return {
        "metadata": {key: metadata[key] for key in (
            "name", "namespace", "uid", "resourceVersion", "generation", "ownerReferences")
            if key in metadata},
        "spec": {key: spec[key] for key in ("active", "queueName") if key in spec},
        "status": {"conditions": status.get("conditions") or [],
                   "admissionChecks": status.get("admissionChecks") or []},
    }


def owner_of(workload: JSON) -> tuple[str, str] | None:
    """(`namespace/name`, UID) of the job controlling the Workload."""
    metadata = workload.get("metadata") or {}
    for ref in metadata.get("ownerReferences") or []:
        if ref.get("controller"):
            return job_key(metadata.get("namespace", ""), str(ref.get("name"))), str(ref.get("uid"))
    return None


class AdmissionCheckController:
    def __init__(self, *, controller_name: str, manager: ClusterClient, kind: JobKind,
                 claim: Claim, origin: str, trainjobs: Informer, records: PlacementRecords,
                 registry: WorkerRegistry, settings: InformerSettings, clock: Clock,
                 on_job: Callable[[str], None],
                 explain: Callable[[str], Awaitable[tuple[str, str] | None]],
                 ready_when: CheckReadyWhen = CheckReadyWhen.MIRROR_CREATED) -> None:
        self.controller_name = controller_name
        self._ready_when = ready_when
        self._kind = kind
        self._claim = claim
        self._origin = origin
        self._trainjobs = trainjobs
        self._records = records
        self._registry = registry
        self._clock = clock
        self._on_job = on_job
        self._explain = explain
        self.workloads = Informer(Resource(manager, k.WORKLOADS), settings=settings,
                                  name="manager/workloads", transform=workload_summary,
                                  clock=clock, indexes={k.WORKLOADS_BY_JOB: k.job_uid_of})
        self.checks = Informer(Resource(manager, k.ADMISSION_CHECKS), settings=settings,
                               name="manager/admissionchecks", clock=clock)
        self.workloads.add_handler(self._on_workload)
        self.checks.add_handler(self._on_check)
        self.queue = WorkQueue(name="admissionchecks", clock=clock)

    @property
    def informers(self) -> list[Informer]:
        return [self.checks, self.workloads]

    def ours(self) -> set[str]:
        """The names of the AdmissionChecks whose controller is this dispatcher."""
        return {obj["metadata"]["name"] for obj in self.checks.store.values()
                if (obj.get("spec") or {}).get("controllerName") == self.controller_name}

    def workload_of(self, job: JSON) -> JSON | None:
        """The job's Workload: owned by the job's UID, in its namespace and by its name (an
        owner reference alone is whatever its writer put there)."""
        uid = str(job["metadata"].get("uid", ""))
        for workload in self.workloads.indexed(k.WORKLOADS_BY_JOB, uid):
            if owner_of(workload) == (object_key(job), uid):
                return workload
        return None

    def gate(self, job: JSON) -> Gate:
        """What the job's Workload allows now (the jobs controller's question)."""
        return gate_of(job, self.workload_of(job), self.ours(),
                       controller=self.controller_name)

    # ----- events: map to keys and enqueue -----

    def _on_workload(self, event_type: str, workload: JSON) -> None:
        owner = owner_of(workload)
        if owner is not None:
            self._on_job(owner[0])
        if event_type != DELETED:
            self.queue.add(WORKLOAD_KEY + object_key(workload))

    def _on_check(self, event_type: str, check: JSON) -> None:
        self.queue.add(CHECK_KEY + check["metadata"]["name"])

    def job_changed(self, key: str) -> None:
        """The jobs controller just reconciled job `key`: our check of it may move."""
        job = self._trainjobs.get(key)
        workload = self.workload_of(job) if job is not None else None
        if workload is not None:
            self.queue.add(WORKLOAD_KEY + object_key(workload))

    def workers_changed(self) -> None:
        for name in self.ours():
            self.queue.add(CHECK_KEY + name)

    # ----- reconcile -----

    async def run(self) -> None:
        for name in self.ours():
            self.queue.add(CHECK_KEY + name)
        for key in list(self.workloads.store):
            self.queue.add(WORKLOAD_KEY + key)
        await self.queue.run_workers(self.reconcile, workers=_WORKERS)

    async def reconcile(self, key: str) -> Result:
        try:
            if key.startswith(CHECK_KEY):
                await self._reconcile_check(key.removeprefix(CHECK_KEY))
            else:
                await self._reconcile_workload(key.removeprefix(WORKLOAD_KEY))
        except ApiException as error:
            if error.status == 409:
                return Result.retry()
            if error.status == 404:
                return Result.done()
            raise
        return Result.done()

    async def job_state(self, workload: JSON) -> WorkloadJob | None:
        """Where the Workload's job stands; None when the manager has no such job (yet)."""
        owner = owner_of(workload)
        job = self._trainjobs.get(owner[0]) if owner else None
        if owner is None or job is None or str(job["metadata"].get("uid")) != owner[1]:
            return None
        finished = self._kind.finished(job.get("status")) is not None
        refusal = self._claim.refusal(job)
        if finished or refusal:
            return WorkloadJob(finished=finished, refusal=refusal,
                               managed_by=self._claim.missing_managed_by(job))
        record = next((r for r in self._records.of_job(owner[0]) if r.uid == owner[1]), None)
        placed_on = record.worker if record is not None and record.placed else ""
        mirrored = admitted = False
        connection = self._registry.get(placed_on) if placed_on else None
        if connection is not None and connection.usable() and connection.mirrors is not None:
            mirror = connection.mirrors.get(owner[0])
            mirrored = mirror is not None and self._kind.is_ours(
                mirror, manager_uid=owner[1], origin=self._origin)
            if mirror is not None and mirrored:
                remote = (connection.kueue.workload_of(mirror["metadata"].get("uid", ""))
                          if connection.kueue is not None else None)
                admitted = admission_of(mirror, remote, kind=self._kind).stage is Stage.ADMITTED
        return WorkloadJob(placed_on=placed_on, mirrored=mirrored, admitted=admitted,
                           why=await self._explain(owner[0]) or ("", ""),
                           taken_off=record.taken_off if record is not None else ("", ""))

    async def _reconcile_workload(self, key: str) -> None:
        workload = self.workloads.get(key)
        if workload is None:
            return
        update = check_update(workload, self.ours(), await self.job_state(workload),
                              ready_when=self._ready_when)
        if update is not None:
            await self._write_check(workload, update)

    async def _write_check(self, workload: JSON, update: CheckUpdate) -> None:
        previous = check_of(workload, {update.name}) or {}
        since = (previous.get("lastTransitionTime")
                 if previous.get("state") == update.state else None)
        metadata = workload["metadata"]
        body = {
            "apiVersion": k.WORKLOADS.api_version, "kind": "Workload",
            "metadata": {"name": metadata["name"], "namespace": metadata["namespace"],
                         "resourceVersion": metadata["resourceVersion"]},
            "status": {"admissionChecks": [{
                "name": update.name, "state": update.state, "message": update.message,
                "lastTransitionTime": since or st.rfc3339(self._clock.time())}]},
        }
        written = await self.workloads.resource.apply(
            body, field_manager=self.controller_name, subresource="status")
        self.workloads.remember(written)
        log.info("Workload %s/%s: AdmissionCheck %s %s: %s", metadata["namespace"],
                 metadata["name"], update.name, update.state, update.message)

    async def _reconcile_check(self, name: str) -> None:
        check = self.checks.get(name)
        if check is None or (check.get("spec") or {}).get("controllerName") != \
                self.controller_name:
            return
        workers = self._registry.workers.values()
        activity = active_of(registered=len(workers),
                             usable=[w.name for w in workers if w.usable()],
                             parameters=(check.get("spec") or {}).get("parameters"))
        new = active_condition(check.get("status"), activity,
                               now=st.rfc3339(self._clock.time()),
                               generation=int(check["metadata"].get("generation", 0)))
        if new is None:
            return
        others = [cond for cond in (check.get("status") or {}).get("conditions") or []
                  if cond.get("type") != c.CONDITION_ACTIVE]
        written = await self.checks.resource.merge_patch(
            name, {"metadata": {"resourceVersion": check["metadata"]["resourceVersion"]},
                   "status": {"conditions": [*others, new]}}, subresource="status")
        self.checks.remember(written)
        log.info("AdmissionCheck %s: Active=%s (%s)", name, new["status"], new["message"])
