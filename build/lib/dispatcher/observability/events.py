"""Kubernetes Events on the manager's TrainJobs, so `kubectl describe` tells the story.

Recording never blocks a reconcile: events go through a bounded queue to one writer
task; when the queue is full an event is dropped (and logged), never the reconcile. An
identical event for the same object within `dedupe_seconds` is written once. The last
`keep_recent` events stay in memory (`recent`) for the status page. The time of an
event and the de-duplication window are read from the injected `Clock`.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from collections import deque
from typing import Any

from dispatcher.clock import Clock
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.resource import EVENTS, Resource

log = logging.getLogger(__name__)

CONTROLLER = "dispatcher.trainjob.io/trainjob-dispatcher"


class EventRecorder:
    def __init__(self, client: ClusterClient, *, instance: str, clock: Clock,
                 capacity: int = 5000, dedupe_seconds: float = 60.0,
                 keep_recent: int = 50) -> None:
        self._events = Resource(client, EVENTS)
        self._clock = clock
        self._instance = instance
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=capacity)
        self._recent: dict[tuple[str, str, str], float] = {}
        self._dedupe_seconds = dedupe_seconds
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep_recent)
        """The latest events recorded, oldest first (written or not)."""

    def record(self, obj: dict[str, Any], *, reason: str, message: str,
               warning: bool = False, action: str = "Dispatch") -> None:
        metadata = obj["metadata"]
        uid = metadata.get("uid", "")
        now = self._clock.monotonic()
        key = (uid, reason, message)
        if now - self._recent.get(key, -1e9) < self._dedupe_seconds:
            return
        self._recent[key] = now
        if len(self._recent) > 20000:
            cutoff = now - self._dedupe_seconds
            self._recent = {k: t for k, t in self._recent.items() if t > cutoff}
        event = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{metadata['name']}.{uuid.uuid4().hex[:12]}",
                         "namespace": metadata.get("namespace", "default")},
            "eventTime": datetime.datetime.fromtimestamp(
                self._clock.time(), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": CONTROLLER,
            "reportingInstance": self._instance,
            "action": action,
            "reason": reason,
            "note": message[:1024],
            "type": "Warning" if warning else "Normal",
            "regarding": {
                "apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                "name": metadata["name"], "namespace": metadata.get("namespace"),
                "uid": uid, "resourceVersion": metadata.get("resourceVersion"),
            },
        }
        self.recent.append(event)
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            log.warning("event queue full, dropping %s event", reason)

    async def run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._events.create(event, namespace=event["metadata"]["namespace"],
                                          verb="event")
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.debug("could not write event %s: %s", event["reason"], error)
