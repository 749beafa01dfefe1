"""Reading a pod's container log from its cluster's API server (`pods/log`), line by line.

The API server asks the node's kubelet for it (kwok's server, on the local workers);
with `follow` the stream stays open for new lines until the caller stops reading (or
the container ends, on a real kubelet), so it has no total timeout, only one to connect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import PODS


@dataclass(frozen=True)
class LogOptions:
    """What `kubectl logs` asks of one container's log."""

    follow: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    timestamps: bool = False

    def query(self, container: str) -> list[tuple[str, Any]]:
        query: list[tuple[str, Any]] = [("container", container)]
        if self.follow:
            query.append(("follow", "true"))
        if self.tail_lines is not None:
            query.append(("tailLines", self.tail_lines))
        if self.since_seconds is not None:
            query.append(("sinceSeconds", self.since_seconds))
        if self.timestamps:
            query.append(("timestamps", "true"))
        return query


async def log_lines(client: ClusterClient, *, namespace: str, pod: str, container: str,
                    options: LogOptions) -> AsyncIterator[str]:
    """The lines of one container's log (without their line ends)."""
    connect = client.settings.timeout_seconds
    timeout = aiohttp.ClientTimeout(total=None if options.follow else 10 * connect,
                                    sock_connect=connect)
    response = await client.stream(PODS.path(namespace=namespace, name=pod, subresource="log"),
                                   query=options.query(container), timeout=timeout,
                                   accept="*/*", verb="log")
    try:
        async for raw in response.content:
            yield raw.decode(errors="replace").rstrip("\r\n")
    finally:
        response.release()
