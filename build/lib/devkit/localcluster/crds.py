"""Installing CustomResourceDefinitions on a local cluster and waiting until they serve."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import yaml
from kubernetes_asyncio.client.exceptions import ApiException
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
    wait_fixed,
)

from devkit.localcluster.access import admin_client
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import CRDS, Resource, ResourceKind

if TYPE_CHECKING:
    from devkit.localcluster.access import ServedCluster

FIELD_MANAGER = "trainjob-dispatcher-localcluster"
APPLY_ATTEMPTS = 4
"""Tries of each CRD's apply: on a start of many API servers sharing few cores, a large
CRD's apply can outlast the client timeout; a server-side apply is safe to repeat."""


def load_manifests(files: Iterable[Path]) -> list[dict[str, Any]]:
    manifests: list[dict[str, Any]] = []
    for path in files:
        manifests.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return manifests


async def wait_established(crds: Resource, names: list[str], *, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in list(pending):
            crd = await crds.get(name)
            conditions = ((crd or {}).get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                pending.discard(name)
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRDs not established: {sorted(pending)}")
            await asyncio.sleep(0.1)


def served_kind(manifest: dict[str, Any]) -> ResourceKind:
    """The resource a CRD serves, at its storage version."""
    spec = manifest["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    return ResourceKind(spec["group"], version, spec["names"]["plural"],
                        namespaced=spec["scope"] == "Namespaced")


def _initializing(error: BaseException) -> bool:
    return isinstance(error, ApiException) and error.status == 429


async def wait_listable(client: ClusterClient, manifests: list[dict[str, Any]], *,
                        timeout: float = 90.0) -> None:
    """Wait until every CRD's resource can be listed: an established CRD's watch cache
    may still be initializing, and until it is, reads answer 429 ("storage is
    (re)initializing")."""
    async def listable(resource: Resource) -> None:
        async for attempt in AsyncRetrying(retry=retry_if_exception(_initializing),
                                           stop=stop_after_delay(timeout),
                                           wait=wait_fixed(0.1), reraise=True):
            with attempt:
                await resource.list()
    await asyncio.gather(*(listable(Resource(client, served_kind(m))) for m in manifests))


async def _apply(crds: Resource, manifest: dict[str, Any]) -> None:
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type((TimeoutError, aiohttp.ClientError)),
        stop=stop_after_attempt(APPLY_ATTEMPTS), wait=wait_exponential(max=5), reraise=True,
    ):
        with attempt:
            await crds.apply(manifest, field_manager=FIELD_MANAGER)


async def install_crds(cluster: ServedCluster, files: Iterable[Path]) -> None:
    """Server-side apply each CRD in `files` and wait until all are established."""
    manifests = load_manifests(files)
    if not manifests:
        return
    client = await admin_client(cluster)
    try:
        crds = Resource(client, CRDS)
        await asyncio.gather(*(_apply(crds, m) for m in manifests))
        await wait_established(crds, [m["metadata"]["name"] for m in manifests])
        await wait_listable(client, manifests)
    finally:
        await client.close()
