"""What the peer benchmark measures, from its own watches and the processes themselves.

- `JobWatch`: one list+watch of the `bench` TrainJobs on one cluster, with the monotonic
  time each job was first seen, first seen running (`spec.suspend` not true: admitted by
  the worker's Kueue, or never suspended) and first seen with an expected status.
- `api_writes()`: the write requests (create, update, patch, apply, delete) each API
  server has served, from its own `apiserver_request_total`; the difference over a phase
  counts every client's writes (controllers, Kueue, the garbage collector, the harness).
- CPU seconds and peak RSS of every process come from /proc (bench/dispatch.py).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.api.trainer import TRAINJOBS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import ADDED, MODIFIED, Informer
from dispatcher.kube.resource import Resource
from dispatcher.localcluster import LocalCluster

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})


class JobWatch:
    """First-seen timestamps of the TrainJobs in one namespace of one cluster."""

    def __init__(self, client: ClusterClient, namespace: str) -> None:
        self.informer = Informer(Resource(client, TRAINJOBS), namespace=namespace,
                                 name=f"peer-bench/{client.name}")
        self.added: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.status_seen: dict[str, float] = {}
        self.expect_status: dict[str, Any] = {}
        self.informer.add_handler(self._on)
        self.task = asyncio.create_task(self.informer.run(), name=f"peer-bench/{client.name}")

    def _on(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type not in (ADDED, MODIFIED):
            return
        now = time.monotonic()
        name = obj["metadata"]["name"]
        self.added.setdefault(name, now)
        if not (obj.get("spec") or {}).get("suspend"):
            self.running.setdefault(name, now)
        expected = self.expect_status.get(name)
        if expected is not None and (obj.get("status") or {}).get("jobsStatus") == expected:
            self.status_seen.setdefault(name, now)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def _ssl_context(cluster: LocalCluster) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cluster.certs.ca_cert))
    context.load_cert_chain(str(cluster.certs.admin_cert), str(cluster.certs.admin_key))
    return context


async def api_writes(cluster: LocalCluster) -> dict[str, float]:
    """Writes served so far by this API server, by resource (`events` included)."""
    async with aiohttp.ClientSession() as session, session.get(
        f"{cluster.url}/metrics", ssl=_ssl_context(cluster)
    ) as response:
        text = await response.text()
    writes: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name == "apiserver_request_total"
                    and sample.labels.get("verb") in WRITE_VERBS):
                resource = sample.labels.get("resource", "")
                if sample.labels.get("subresource"):
                    resource += "/" + sample.labels["subresource"]
                writes[resource] = writes.get(resource, 0.0) + sample.value
    return writes


def difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}
