"""A stand-in for the worker's Kubeflow trainer, for the demo and the benchmark.

The local clusters have no nodes, so no pod ever runs. `SimulatedTrainer` watches the
TrainJobs on one worker that the real trainer would run (no `managedBy`, or the
trainer's own) and moves each through its life as the trainer would report it: jobs
active after `start_delay`, then the `Complete` condition after `run_seconds`; a job
suspended while it runs (preempted by the worker's Kueue) stops, its jobs suspended. An
annotation `simulated-trainer/outcome: Failed` makes a job fail instead, and
`simulated-trainer/run-seconds` overrides its duration.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api.trainer import MANAGED_BY_TRAINER, TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import DELETED, Informer, object_key
from dispatcher.kube.resource import Resource

log = logging.getLogger(__name__)
JSON = dict[str, Any]
OUTCOME_ANNOTATION = "simulated-trainer/outcome"
RUN_SECONDS_ANNOTATION = "simulated-trainer/run-seconds"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _nodes(job: JSON) -> int:
    return int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)


class SimulatedTrainer:
    """Plays the trainer controller on one worker cluster."""

    def __init__(self, client: ClusterClient, *, start_delay: float = 0.5,
                 run_seconds: float = 5.0) -> None:
        self.client = client
        self.start_delay = start_delay
        self.run_seconds = run_seconds
        self._jobs = Resource(client, TRAINJOBS)
        self._informer = Informer(self._jobs, name=f"{client.name}/simulated-trainer")
        self._informer.add_handler(self._on_event)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._writes: set[asyncio.Task[None]] = set()

    def _ours(self, job: JSON) -> bool:
        managed_by = (job.get("spec") or {}).get("managedBy")
        return managed_by in (None, MANAGED_BY_TRAINER)

    def _on_event(self, event_type: str, job: JSON) -> None:
        key = object_key(job)
        if event_type == DELETED or (job.get("spec") or {}).get("suspend"):
            task = self._running.pop(key, None)
            if task:
                task.cancel()
                if event_type != DELETED:  # suspended while it ran: its pods are gone
                    nodes = _nodes(job)
                    write = asyncio.get_running_loop().create_task(self._patch_status(job, {
                        "jobsStatus": [{"name": "node", "active": 0, "ready": 0,
                                        "succeeded": 0, "failed": 0, "suspended": nodes}]}),
                        name=f"simulated-trainer/{key}/suspended")
                    self._writes.add(write)
                    write.add_done_callback(self._writes.discard)
            return
        status = job.get("status") or {}
        if not self._ours(job) or key in self._running or status.get("conditions"):
            return
        self._running[key] = asyncio.get_running_loop().create_task(
            self._run(job), name=f"simulated-trainer/{key}")

    async def _patch_status(self, job: JSON, status: JSON) -> None:
        """Write the status, retrying while the worker is unreachable; give up if the
        job is gone (404) or the write is refused."""
        metadata = job["metadata"]
        for attempt in range(60):
            try:
                await self._jobs.merge_patch(metadata["name"], {"status": status},
                                             namespace=metadata["namespace"],
                                             subresource="status")
                return
            except ApiException as error:
                if error.status and error.status < 500:
                    return
            except (TimeoutError, aiohttp.ClientError):
                pass
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))

    async def _run(self, job: JSON) -> None:
        annotations = job["metadata"].get("annotations") or {}
        nodes = _nodes(job)
        try:
            await asyncio.sleep(self.start_delay)
            await self._patch_status(job, {"jobsStatus": [
                {"name": "node", "active": nodes, "ready": nodes, "succeeded": 0, "failed": 0,
                 "suspended": 0}]})
            await asyncio.sleep(float(annotations.get(RUN_SECONDS_ANNOTATION, self.run_seconds)))
            failed = annotations.get(OUTCOME_ANNOTATION) == "Failed"
            condition = {
                "type": "Failed" if failed else "Complete", "status": "True",
                "reason": "TrainingFailed" if failed else "AllJobsCompleted",
                "message": "simulated training " + ("failed" if failed else "completed"),
                "lastTransitionTime": _now(),
            }
            await self._patch_status(job, {
                "conditions": [condition],
                "jobsStatus": [{"name": "node", "active": 0, "ready": 0,
                                "succeeded": 0 if failed else nodes,
                                "failed": nodes if failed else 0, "suspended": 0}],
            })
        finally:
            self._running.pop(object_key(job), None)

    async def run(self) -> None:
        try:
            await self._informer.run()
        finally:
            for task in self._running.values():
                task.cancel()
