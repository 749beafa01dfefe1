"""The writes on a worker: create a job's mirror, delete it. Only ever our own.

A mirror carries the origin label, the manager job's UID and the demand booked for it
(`dispatcher.trainjob.io/demand`), so the ledger can count it as what it is: evidence of
what runs on the worker, whatever the manager says.

With `workers.createNamespaces`, the job's namespace is made on the worker before its
first mirror there, and remembered as made; a create that answers 404 because the
namespace has gone since (deleted on the worker) forgets it, makes it again and tries
once more. A create that meets a 409 reads what is there and accepts it only when it
carries our origin label and the manager job's UID; anything else there is a name
conflict. A refusal (400, 403, 404, 409, 422) is the worker rejecting the mirror. Deletes carry the
mirror's UID as a precondition, so a mirror re-created a moment ago is never lost, and
an object we did not create is never touched. Each write answers what it found; the
controller records it (this module remembers nothing of the job).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.controllers.workers import WorkerConnection
from dispatcher.kinds import JobKind
from dispatcher.kube.informer import object_key
from dispatcher.kube.resource import NAMESPACES, Resource, message_of
from dispatcher.observability.metrics import Metrics
from dispatcher.placement import resources

JSON = dict[str, Any]
_REJECTION_CODES = {400, 403, 404, 409, 422}


@dataclass(frozen=True)
class Refused:
    reason: str
    message: str


class WorkerWriter:
    def __init__(self, *, kind: JobKind, origin: str, create_namespaces: bool,
                 metrics: Metrics) -> None:
        self.kind = kind
        self.origin = origin
        self.create_namespaces = create_namespaces
        self.metrics = metrics
        self._namespaces: dict[str, set[str]] = {}

    async def _ensure_namespace(self, worker: WorkerConnection, namespace: str) -> None:
        known = self._namespaces.setdefault(worker.name, set())
        if namespace in known or not self.create_namespaces:
            return
        assert worker.client is not None
        try:
            await Resource(worker.client, NAMESPACES).create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        except ApiException as error:
            if error.status != 409:
                raise
        known.add(namespace)

    def _forget_namespace(self, worker: WorkerConnection, namespace: str) -> bool:
        """Forget that `namespace` exists on `worker`; whether it was thought to."""
        known = self._namespaces.get(worker.name, set())
        if namespace not in known:
            return False
        known.discard(namespace)
        return True

    async def create_mirror(self, job: JSON, worker: WorkerConnection,
                            demand: Mapping[str, Fraction]) -> tuple[JSON, bool] | Refused:
        """(the mirror now on the worker, whether this call created it), or why not."""
        assert worker.client is not None and worker.mirrors is not None
        metadata = job["metadata"]
        body = self.kind.build_mirror(job, origin=self.origin,
                                      local_queue=worker.spec.local_queue)
        body["metadata"]["annotations"][c.ANNOTATION_DEMAND] = resources.format_vector(demand)
        remote = Resource(worker.client, self.kind.kind)
        await self._ensure_namespace(worker, metadata["namespace"])
        try:
            try:
                created = await remote.create(body, namespace=metadata["namespace"])
            except ApiException as error:
                if not (error.status == 404 and self._forget_namespace(
                        worker, metadata["namespace"])):
                    raise
                await self._ensure_namespace(worker, metadata["namespace"])
                created = await remote.create(body, namespace=metadata["namespace"])
        except ApiException as error:
            if error.status == 409:
                existing = await remote.get(metadata["name"], namespace=metadata["namespace"])
                if existing is not None and self.kind.is_ours(
                        existing, manager_uid=metadata["uid"], origin=self.origin):
                    worker.mirrors.remember(existing)
                    return existing, False
                return Refused(c.REASON_NAME_CONFLICT,
                               f"{object_key(job)} already exists on {worker.name} and was not "
                               "created by this dispatcher")
            if error.status in _REJECTION_CODES:
                return Refused(c.REASON_MIRROR_REJECTED,
                               f"{worker.name} rejected the mirror: {message_of(error)}")
            self.metrics.dispatch_errors.labels(worker.name, f"http-{error.status}").inc()
            raise
        worker.mirrors.remember(created)
        return created, True

    async def delete_mirror(self, worker: WorkerConnection, mirror: JSON) -> bool:
        """Delete our `mirror` (its UID the precondition): True when this call deleted it,
        False when its name holds another object now (ours is gone all the same). The
        worker's cache forgets it either way."""
        assert worker.client is not None and worker.mirrors is not None
        metadata = mirror["metadata"]
        deleted = True
        try:
            await Resource(worker.client, self.kind.kind).delete(
                metadata["name"], namespace=metadata["namespace"], uid=metadata["uid"])
        except ApiException as error:
            if error.status != 409:
                raise
            deleted = False
        worker.mirrors.forget(object_key(mirror))
        return deleted
