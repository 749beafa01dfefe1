"""What the peer benchmark measures, from its own watches and the processes themselves.

- The TrainJobs' first-seen, first-running and status times: `bench.harness.JobWatch`.
- `api_writes()`: the write requests (create, update, patch, apply, delete) each API
  server has served, from its own `apiserver_request_total`; the difference over a phase
  counts every client's writes (controllers, Kueue, the garbage collector, the harness).
  `api_writes(cluster, verbs=READ_VERBS)` counts single-object reads (GET) the same way:
  on a worker they are mostly MultiKueue's, whose remote clients have no cache (every
  Kueue and the dispatcher read their own clusters through watches).
- `WorkloadStages`: on a Kueue cluster (MultiKueue's manager), when each job's Workload
  was first seen, first had its quota reserved and was first admitted (every admission
  check Ready: for MultiKueue, a worker has reserved it): where the time goes.
- CPU seconds and peak RSS of every process come from /proc (bench/harness.py).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from devkit.localcluster import LocalCluster
from dispatcher.api.kueue import WORKLOADS
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.informer import ADDED, MODIFIED, Informer
from dispatcher.kube.resource import Resource

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})
READ_VERBS = frozenset({"GET"})


class WorkloadStages:
    """First-seen times of each Workload's stages, keyed by the owning job's name."""

    STAGES = ("QuotaReserved", "Admitted")

    def __init__(self, client: ClusterClient, namespace: str) -> None:
        self.informer = Informer(Resource(client, WORKLOADS), namespace=namespace,
                                 name=f"peer-bench/{client.name}/workloads")
        self.seen: dict[str, dict[str, float]] = {}
        self.informer.add_handler(self._on)
        self.task = asyncio.create_task(self.informer.run(),
                                        name=f"peer-bench/{client.name}/workloads")

    def _on(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type not in (ADDED, MODIFIED):
            return
        now = time.monotonic()
        owners = obj["metadata"].get("ownerReferences") or [{}]
        stages = self.seen.setdefault(owners[0].get("name", obj["metadata"]["name"]), {})
        stages.setdefault("created", now)
        for condition in (obj.get("status") or {}).get("conditions") or []:
            if condition.get("type") in self.STAGES and condition.get("status") == "True":
                stages.setdefault(condition["type"], now)

    def summary(self, created_at: dict[str, float], remote: dict[str, float]
                ) -> dict[str, Any]:
        """p50/p99 of each step: job created -> Workload -> quota reserved -> admitted
        (every check Ready: MultiKueue's once a worker reserved it, the dispatcher's once
        it created the mirror) -> the remote job exists (seen by the harness's watch)."""
        return steps(["create", "workload", "quota_reserved", "admitted", "remote_job"],
                     [created_at, self.first("created"), self.first("QuotaReserved"),
                      self.first("Admitted"), remote])

    def first(self, stage: str) -> dict[str, float]:
        return {name: stages[stage] for name, stages in self.seen.items() if stage in stages}

    @staticmethod
    def merged(watches: list[WorkloadStages], stage: str) -> dict[str, float]:
        """The earliest time of `stage` per job over several clusters."""
        result: dict[str, float] = {}
        for watch in watches:
            for name, at in watch.first(stage).items():
                result[name] = min(at, result.get(name, at))
        return result

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def steps(names: list[str], times: list[dict[str, float]]) -> dict[str, Any]:
    """Latency of each step between consecutive moments of every job (`times[i]`: job
    name -> moment `names[i]`), for the jobs that have both."""
    from bench.harness import percentiles

    result = {}
    for index in range(len(names) - 1):
        start, end = times[index], times[index + 1]
        values = [end[n] - start[n] for n in start if n in end]
        result[f"{names[index]}_to_{names[index + 1]}"] = {"jobs": len(values),
                                                            **percentiles(values)}
    return result


def _ssl_context(cluster: LocalCluster) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cluster.certs.ca_cert))
    context.load_cert_chain(str(cluster.certs.admin_cert), str(cluster.certs.admin_key))
    return context


async def api_writes(cluster: LocalCluster, *, verbs: frozenset[str] = WRITE_VERBS
                     ) -> dict[str, float]:
    """Writes (or `verbs`) served so far by this API server, by resource (`events`
    included)."""
    async with aiohttp.ClientSession() as session, session.get(
        f"{cluster.url}/metrics", ssl=_ssl_context(cluster)
    ) as response:
        text = await response.text()
    # Ten workers' full /metrics take minutes to parse; the one family is a few KB.
    wanted = "\n".join(line for line in text.splitlines()
                       if line.startswith("apiserver_request_total{"))
    writes: dict[str, float] = {}
    for family in text_string_to_metric_families(wanted + "\n"):
        for sample in family.samples:
            if (sample.name == "apiserver_request_total"
                    and sample.labels.get("verb") in verbs):
                resource = sample.labels.get("resource", "")
                if sample.labels.get("subresource"):
                    resource += "/" + sample.labels["subresource"]
                writes[resource] = writes.get(resource, 0.0) + sample.value
    return writes


async def dispatcher_api_latency(port: int) -> dict[str, dict[str, float]]:
    """The dispatcher's own API calls so far: count and mean latency (ms) per cluster and
    verb, from its `dispatcher_api_request_duration_seconds`."""
    async with aiohttp.ClientSession() as session, session.get(
            f"http://127.0.0.1:{port}/metrics") as response:
        text = await response.text()
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = f"{sample.labels.get('cluster')}/{sample.labels.get('verb')}"
            if sample.name == "dispatcher_api_request_duration_seconds_sum":
                sums[key] = sample.value
            elif sample.name == "dispatcher_api_request_duration_seconds_count":
                counts[key] = sample.value
    return {key: {"count": counts[key], "mean_ms": round(sums[key] / counts[key] * 1000, 1)}
            for key in sorted(counts) if counts[key]}


def difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}
