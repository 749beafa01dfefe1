"""Registered workers: WorkerCluster objects (and their Secrets) or the config file.

Turns each registration into a `WorkerSpec`: the kubeconfig is read from the Secret in
the dispatcher's own namespace and validated, the quota parsed. Whatever is wrong
becomes the worker's reason (`SecretNotFound`, `BadKubeconfig`, `InsecureKubeconfig`,
`BadQuota`) instead of an exception, so one bad registration never stops the others.
The registry is brought in line on every change, and each WorkerCluster's status shows
its `Active` condition, last probe time, mirror count and quota, written only when it
changes (and, to refresh the last probe time, once a minute). Times are read from the
injected `Clock`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import logging
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from dispatcher.api import constants as c
from dispatcher.api.workercluster import DEFAULT_SECRET_KEY, ConfigProblem, WorkerSpec
from dispatcher.clock import Clock
from dispatcher.config import DispatcherConfig, StaticWorker
from dispatcher.controllers.status import rfc3339
from dispatcher.controllers.workers import WorkerConnection, WorkerRegistry
from dispatcher.kube.informer import Informer
from dispatcher.kube.kubeconfig import KubeconfigError, parse_kubeconfig
from dispatcher.placement.capacity import Capacity
from dispatcher.placement.quantity import format_quantity
from dispatcher.placement.validation import DemandError, checked_quantities

log = logging.getLogger(__name__)
JSON = dict[str, Any]
_PROBE_TIME_REFRESH_SECONDS = 60.0
_RESYNC_SECONDS = 2.0
"""Statuses are written this often even without a change event (usage moves silently)."""


def _parse_quota(raw: dict[str, Any] | None) -> tuple[dict[str, Any] | None, ConfigProblem | None]:
    if not raw:
        return None, None
    try:
        return checked_quantities(raw, path="spec.quota"), None
    except DemandError as error:
        return None, ConfigProblem(c.REASON_BAD_QUOTA, f"quota cannot be used: {error}")


def _kubeconfig(text: str | bytes, *, allow_insecure: bool) -> tuple[JSON | None,
                                                                      ConfigProblem | None]:
    try:
        return parse_kubeconfig(text, allow_insecure=allow_insecure), None
    except KubeconfigError as error:
        reason = c.REASON_INSECURE_KUBECONFIG if error.insecure else c.REASON_BAD_KUBECONFIG
        return None, ConfigProblem(reason, str(error))


def static_spec(worker: StaticWorker, *, allow_insecure: bool) -> WorkerSpec:
    quota, quota_problem = _parse_quota(worker.quota)
    try:
        kubeconfig, problem = _kubeconfig(worker.kubeconfig.read_text(),
                                          allow_insecure=allow_insecure)
    except OSError as error:
        kubeconfig, problem = None, ConfigProblem(
            c.REASON_BAD_KUBECONFIG, f"cannot read {worker.kubeconfig}: {error.strerror}")
    return WorkerSpec(
        name=worker.name, kubeconfig=kubeconfig, problem=problem or quota_problem,
        quota=quota, labels=dict(worker.labels), local_queue=worker.local_queue,
        cluster_queue=worker.cluster_queue, cordoned=worker.cordoned, from_crd=False,
    )


def _amounts(vector: dict[str, Fraction]) -> dict[str, str]:
    return {name: format_quantity(amount) for name, amount in sorted(vector.items())}


_AMOUNT_FIELDS = ("quota", "used", "usedByUs", "usedByOthers", "free")


def _removing_stale(current: JSON, desired: JSON) -> JSON:
    """`desired` as a merge patch over `current`: resources (and amount fields) no longer
    there are set to null, since a merge patch only adds to a map."""
    patch = dict(desired)
    for name in _AMOUNT_FIELDS:
        old = current.get(name)
        if not isinstance(old, dict):
            continue
        if name not in desired:
            patch[name] = None
        else:
            patch[name] = {**{k: None for k in old if k not in desired[name]}, **desired[name]}
    return patch


class WorkerClustersController:
    def __init__(
        self,
        *,
        config: DispatcherConfig,
        registry: WorkerRegistry,
        capacity_of: Callable[[WorkerConnection], Capacity],
        worker_clusters: Informer | None,
        secrets: Informer | None,
        clock: Clock,
        missing_runtimes_of: Callable[[str], list[str]] = lambda worker: [],
    ) -> None:
        self.config = config
        self.clock = clock
        self.registry = registry
        self.capacity_of = capacity_of
        self.missing_runtimes_of = missing_runtimes_of
        """Worker -> the runtimes pending jobs need that it lacks, in words."""
        self.worker_clusters = worker_clusters
        self.secrets = secrets
        self._changed = asyncio.Event()
        self._written: dict[str, tuple[JSON, float]] = {}

    def trigger(self, *_: object) -> None:
        self._changed.set()

    def _secret_kubeconfig(self, spec: JSON) -> tuple[JSON | None, ConfigProblem | None]:
        ref = spec.get("kubeconfigSecretRef") or {}
        name, key = ref.get("name", ""), ref.get("key") or DEFAULT_SECRET_KEY
        secret = self.secrets.get(f"{self.config.namespace}/{name}") if self.secrets else None
        if secret is None:
            return None, ConfigProblem(
                c.REASON_SECRET_NOT_FOUND,
                f"Secret {self.config.namespace}/{name} not found")
        data = (secret.get("data") or {}).get(key)
        if data is None:
            return None, ConfigProblem(c.REASON_BAD_KUBECONFIG,
                                       f"Secret {self.config.namespace}/{name} has no key {key!r}")
        try:
            text = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return None, ConfigProblem(c.REASON_BAD_KUBECONFIG,
                                       f"Secret key {key!r} is not valid base64")
        return _kubeconfig(text, allow_insecure=self.config.workers.allow_insecure_kubeconfigs)

    def crd_spec(self, obj: JSON) -> WorkerSpec:
        spec = obj.get("spec") or {}
        kubeconfig, problem = self._secret_kubeconfig(spec)
        quota, quota_problem = _parse_quota(spec.get("quota"))
        return WorkerSpec(
            name=obj["metadata"]["name"], kubeconfig=kubeconfig,
            problem=problem or quota_problem, quota=quota,
            labels=dict(obj["metadata"].get("labels") or {}),
            local_queue=spec.get("localQueue", ""), cluster_queue=spec.get("clusterQueue", ""),
            cordoned=bool(spec.get("cordoned")), drain=bool(spec.get("drain")),
        )

    def specs(self) -> list[WorkerSpec]:
        allow = self.config.workers.allow_insecure_kubeconfigs
        found = [static_spec(w, allow_insecure=allow) for w in self.config.workers.static]
        if self.worker_clusters is not None:
            found.extend(self.crd_spec(obj) for obj in self.worker_clusters.store.values())
        return found

    def persisted_lost_since(self) -> dict[str, float]:
        """When each worker was last seen lost, from its status: survives restarts."""
        lost: dict[str, float] = {}
        for obj in (self.worker_clusters.store.values() if self.worker_clusters else []):
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if (cond.get("type") == c.CONDITION_ACTIVE and cond.get("status") == "False"
                        and cond.get("reason") in (c.REASON_UNREACHABLE, c.REASON_UNAUTHORIZED)):
                    since = datetime.datetime.fromisoformat(cond["lastTransitionTime"])
                    lost[obj["metadata"]["name"]] = since.timestamp()
        return lost

    async def sync(self) -> None:
        await self.registry.apply(self.specs(), lost_since=self.persisted_lost_since())

    def desired_status(self, obj: JSON, worker: WorkerConnection) -> JSON:
        previous: JSON = next((cond for cond in (obj.get("status") or {}).get("conditions") or []
                         if cond.get("type") == c.CONDITION_ACTIVE), {})
        status = "True" if worker.active else "False"
        since = previous.get("lastTransitionTime")
        if previous.get("status") != status or not since:
            since = (rfc3339(worker.lost_since) if worker.lost_since and not worker.active
                     else rfc3339(self.clock.time()))
        capacity = self.capacity_of(worker)
        desired: JSON = {
            "conditions": [{"type": c.CONDITION_ACTIVE, "status": status,
                            "reason": worker.reason, "message": worker.message,
                            "lastTransitionTime": since}],
            "mirrors": len(worker.mirrors.store) if worker.mirrors else 0,
            "used": _amounts(capacity.used),
            "usedByUs": _amounts(capacity.used_by_us),
            "usedByOthers": _amounts(capacity.used_by_others),
        }
        if capacity.quota is not None and capacity.free is not None:
            desired["quota"] = _amounts(capacity.quota)
            desired["free"] = _amounts(capacity.free)
        missing = self.missing_runtimes_of(worker.name)
        if missing:
            desired["missingRuntimes"] = missing
        return desired

    async def write_statuses(self) -> None:
        if self.worker_clusters is None:
            return
        client = self.worker_clusters.resource
        for name, worker in list(self.registry.workers.items()):
            obj = self.worker_clusters.get(name)
            if obj is None or not worker.spec.from_crd:
                continue
            desired = self.desired_status(obj, worker)
            written, at = self._written.get(name, ({}, 0.0))
            stale_probe = self.clock.monotonic() - at > _PROBE_TIME_REFRESH_SECONDS
            if desired == written and not stale_probe:
                continue
            if worker.last_probe:
                desired_with_probe = dict(desired, lastProbeTime=rfc3339(worker.last_probe))
            else:
                desired_with_probe = desired
            try:
                await client.merge_patch(
                    name, {"status": _removing_stale(obj.get("status") or {}, desired_with_probe)},
                    subresource="status")
            except ApiException as error:
                log.debug("cannot write status of WorkerCluster %s: %s", name, error.status)
                continue
            self._written[name] = (desired, self.clock.monotonic())

    async def run(self) -> None:
        """Apply registrations and write statuses on changes, and every `_RESYNC_SECONDS`."""
        for informer in (self.worker_clusters, self.secrets):
            if informer is not None:
                await informer.synced.wait()
        while True:
            try:
                if self._changed.is_set():
                    self._changed.clear()
                    await self.sync()
                await self.write_statuses()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("syncing workers failed")
            await self.clock.wait(self._changed, _RESYNC_SECONDS)
