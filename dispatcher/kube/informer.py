"""A list+watch cache of one resource kind in one cluster.

The watch works in three layers, like kopf's:
1. `run()` keeps it alive forever: on any failure it reports the error, waits with
   exponential backoff (tenacity's wait policy) and starts over. As in client-go's
   reflector, the backoff starts again from its first step once a watch has been up
   for `backoff_reset_seconds`: one hiccup after a quiet day waits half a second, not
   the maximum.
2. `_list_then_watch()` lists everything (paginated), replaces the cache, emits the
   differences, then watches from the list's resourceVersion. "410 Gone" (an expired
   resourceVersion) ends the watch and forces a relist.
3. `_watch_once()` reads one HTTP stream line by line. Bookmarks only move the
   resourceVersion; an ERROR event raises; a stream silent for longer than the server's
   watch timeout plus a margin is treated as dead.

Handlers get `(event_type, object)` for every change, including the synthetic ones a
relist finds; they must not block: the controllers only map them to keys and enqueue.
An informer may keep indexes (`indexes`: name -> a function giving an object's value,
or None), like client-go's indexers: `indexed(name, value)` answers from the cache
without a scan, e.g. the Workloads of one job by Kueue's job-uid label.
A change this process made and `remember`ed is not emitted again when its watch event
arrives, whether that event comes before or after later writes of the same object: the
controller that wrote it already acted on it. A watch event older than the cached object
(a later write of ours was remembered first) never takes the cache back to it; it is
emitted with the newer object. The answer to a write that
arrives after the watch reported the object deleted (the last finalizer removed) is not
remembered: the cache never holds a ghost of a deleted object.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from tenacity import wait_exponential_jitter

from dispatcher.clock import Clock, SystemClock
from dispatcher.kube.client import JSON
from dispatcher.kube.resource import Resource, status_of

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
EventHandler = Callable[[str, JSON], None]
Indexer = Callable[[JSON], str | None]
ConnectionHandler = Callable[[Exception | None], None]
"""Called with None when the informer is synced and watching, with the error otherwise."""


def object_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name` for namespaced objects, `name` for cluster-scoped ones: the key of
    the caches, and so of the work queue (one job key everywhere: interned, so the
    caches, indexes and queues that hold a key share one string)."""
    metadata = obj["metadata"]
    namespace = metadata.get("namespace")
    return sys.intern(f"{namespace}/{metadata['name']}" if namespace
                      else str(metadata["name"]))


def job_key(namespace: str, name: str) -> str:
    """The key of the job `namespace/name` (what `object_key` gives its object), for
    readers that know the job only by name: a record's, a Workload owner's."""
    return f"{namespace}/{name}"


class ResourceVersionExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


@dataclass(frozen=True)
class InformerSettings:
    watch_timeout_seconds: int = 300
    """Server-side timeout of one watch request; the watch is reopened after it."""
    inactivity_margin_seconds: float = 30.0
    """A stream silent for the watch timeout plus this long is treated as dead."""
    page_size: int = 500
    backoff_initial_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    backoff_reset_seconds: float = 60.0


class Informer:
    """Keeps `store` equal to the objects of one kind and calls handlers on changes."""

    def __init__(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        settings: InformerSettings | None = None,
        on_connection: ConnectionHandler | None = None,
        name: str = "",
        transform: Callable[[JSON], JSON] | None = None,
        clock: Clock | None = None,
        indexes: Mapping[str, Indexer] | None = None,
    ) -> None:
        self.resource = resource
        self._clock: Clock = clock or SystemClock()
        self._transform = transform
        """Applied to every object before it is cached and handed to handlers: a cache of
        many large objects keeps only the fields its readers use."""
        self.namespace = namespace
        self.label_selector = label_selector
        self.settings = settings or InformerSettings()
        self.name = name or f"{resource.client.name}/{resource.kind.plural}"
        self.store: dict[str, JSON] = {}
        self._indexers = dict(indexes or {})
        self._indexed: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        """Index name -> value -> the keys of the cached objects with that value."""
        self._deleted: dict[str, int] = {}
        """Recently deleted keys and the revision of their deletion (bounded)."""
        self._echoes: dict[str, set[int]] = {}
        """Key -> the revisions of this process's remembered writes whose watch events
        have not arrived yet (bounded per key; cleared by a relist)."""
        self.synced = asyncio.Event()
        self.restarts = 0
        self._handlers: list[EventHandler] = []
        self._on_connection = on_connection
        self._resource_version = ""
        self._backoff = Backoff(initial=self.settings.backoff_initial_seconds,
                                maximum=self.settings.backoff_max_seconds,
                                reset_after=self.settings.backoff_reset_seconds)

    def add_handler(self, handler: EventHandler) -> None:
        self._handlers.append(handler)

    def get(self, key: str) -> JSON | None:
        return self.store.get(key)

    def indexed(self, index: str, value: str) -> list[JSON]:
        """The cached objects whose `index` value is `value`."""
        return [self.store[key] for key in sorted(self._indexed[index].get(value, ()))]

    def counts(self, index: str) -> dict[str, int]:
        """How many cached objects have each value of `index`."""
        return {value: len(keys) for value, keys in self._indexed[index].items()}

    def _put(self, key: str, obj: JSON) -> None:
        self._unindex(key)
        self.store[key] = obj
        for name, indexer in self._indexers.items():
            value = indexer(obj)
            if value is not None:
                self._indexed[name].setdefault(value, set()).add(key)

    def _drop(self, key: str) -> None:
        self._unindex(key)
        self.store.pop(key, None)

    def _unindex(self, key: str) -> None:
        cached = self.store.get(key)
        if cached is None:
            return
        for name, indexer in self._indexers.items():
            value = indexer(cached)
            keys = self._indexed[name].get(value) if value is not None else None
            if value is not None and keys is not None:
                keys.discard(key)
                if not keys:
                    del self._indexed[name][value]

    def remember(self, obj: JSON) -> None:
        """Put an object this process just wrote into the cache, unless the cache is newer.

        Reconciles that follow a write then see it at once instead of a stale copy until
        the watch event arrives (client-go's mutation cache).
        """
        key = object_key(obj)
        deleted_at = self._deleted.get(key)
        if deleted_at is not None and _revision(obj) <= deleted_at:
            return  # the answer to a write that the watch already reported deleted
        cached = self.store.get(key)
        if cached is not None and not _newer(obj, cached):
            return  # the cache holds a later change
        if cached is None or not _same_version(cached, obj):
            echoes = self._echoes.setdefault(key, set())
            echoes.add(_revision(obj))
            if len(echoes) > _ECHOES_KEPT:
                echoes.discard(min(echoes))
        # else the watch told this write first: no echo is to come (none is kept for it)
        self._put(key, self._kept(obj))

    def _kept(self, obj: JSON) -> JSON:
        obj = _trimmed(obj)
        return self._transform(obj) if self._transform is not None else obj

    def forget(self, key: str) -> None:
        """Drop an object this process just deleted from the cache."""
        self._drop(key)

    def _emit(self, event_type: str, obj: JSON) -> None:
        for handler in self._handlers:
            try:
                handler(event_type, obj)
            except Exception:
                log.exception("%s: event handler failed", self.name)

    def _report(self, error: Exception | None) -> None:
        if self._on_connection:
            try:
                self._on_connection(error)
            except Exception:
                log.exception("%s: connection handler failed", self.name)

    async def run(self) -> None:
        """List and watch until cancelled; never raises except CancelledError."""
        while True:
            try:
                await self._list_then_watch()
            except asyncio.CancelledError:
                raise
            except ResourceVersionExpired:
                log.info("%s: resourceVersion expired, relisting", self.name)
                self._backoff.reset()
                continue
            except Exception as error:
                self.restarts += 1
                self._report(error)
                delay = self._backoff.failed(self._clock.monotonic())
                log.warning("%s: watch failed (%s), retrying in %.1fs",
                            self.name, _describe(error), delay)
                await self._clock.sleep(delay)

    async def _list(self) -> None:
        items: dict[str, JSON] = {}
        token: str | None = None
        while True:
            page = await self.resource.list(
                namespace=self.namespace,
                label_selector=self.label_selector,
                limit=self.settings.page_size,
                continue_token=token,
                timeout=max(60.0, self.resource.client.settings.timeout_seconds),
            )
            kind = self.resource.kind
            for item in page.get("items", []):
                item.setdefault("apiVersion", kind.api_version)
                items[object_key(item)] = self._kept(item)
            token = page.get("metadata", {}).get("continue")
            if not token:
                self._resource_version = page["metadata"]["resourceVersion"]
                break
        old = self.store
        self.store = {}
        self._echoes = {}
        self._indexed = {name: {} for name in self._indexers}
        for key, obj in items.items():
            self._put(key, obj)
        for key, obj in old.items():
            if key not in items:
                self._emit(DELETED, obj)
        for key, obj in items.items():
            previous = old.get(key)
            if previous is None:
                self._emit(ADDED, obj)
            elif previous["metadata"].get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self._emit(MODIFIED, obj)

    async def _list_then_watch(self) -> None:
        await self._list()
        self.synced.set()
        self._report(None)
        while True:
            await self._watch_once()

    async def _watch_once(self) -> None:
        timeout_seconds = self.settings.watch_timeout_seconds + random.randint(0, 30)
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self._resource_version),
            ("timeoutSeconds", timeout_seconds),
        ]
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        client_timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.resource.client.settings.timeout_seconds,
            sock_read=timeout_seconds + self.settings.inactivity_margin_seconds,
        )
        try:
            response = await self.resource.client.stream(
                self.resource.kind.path(namespace=self.namespace),
                query=query,
                timeout=client_timeout,
            )
        except Exception as error:
            if status_of(error) == 410:
                raise ResourceVersionExpired from error
            raise
        self._backoff.up(self._clock.monotonic())
        try:
            async for line in response.content:
                if line.strip():
                    self._handle_line(line)
        finally:
            response.release()

    def _handle_line(self, line: bytes) -> None:
        event = json.loads(line)
        event_type = event["type"]
        obj = event["object"]
        if event_type == "ERROR":
            if obj.get("code") == 410:
                raise ResourceVersionExpired(obj.get("message", ""))
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        self._resource_version = obj["metadata"]["resourceVersion"]
        if event_type == "BOOKMARK":
            return
        obj.setdefault("apiVersion", self.resource.kind.api_version)
        obj = self._kept(obj)
        key = object_key(obj)
        echoes = self._echoes.pop(key, set())
        if event_type == DELETED:
            self._drop(key)
            self._deleted[key] = _revision(obj)
            if len(self._deleted) > _DELETED_KEPT:
                del self._deleted[next(iter(self._deleted))]
        else:
            self._deleted.pop(key, None)
            revision = _revision(obj)
            if revision in echoes:
                echoes.discard(revision)
                if echoes:
                    self._echoes[key] = echoes
                return  # the echo of this process's own write, already `remember`ed
            if echoes:
                self._echoes[key] = echoes
            cached = self.store.get(key)
            if cached is not None and _same_version(cached, obj):
                return  # nothing new
            if cached is not None and not _newer(obj, cached):
                obj = cached  # a later write of ours is cached: never go back to this one
            else:
                self._put(key, obj)
        self._emit(event_type, obj)


def _trimmed(obj: JSON) -> JSON:
    """The object without `metadata.managedFields`, which nothing here reads and which is
    often the largest part of an object, and with its keys and short strings shared
    (`_intern`): caches of many objects stay small. The object itself is kept (changed
    in place), so a caller's copy of a write it remembers is the cached one."""
    obj.get("metadata", {}).pop("managedFields", None)
    _intern(obj)
    return obj


_INTERNED_LENGTH = 64


def _intern(value: dict[str, Any] | list[Any]) -> None:
    """Intern, in place, the keys and short strings of decoded JSON: each object of a
    cache then spells "apiVersion", "trainer.kubeflow.org/v1alpha1" or "1Gi" with the
    same string, which halves what a TrainJob costs to keep (4.3 KiB to 1.9 KiB)."""
    if isinstance(value, dict):
        pairs = list(value.items())
        value.clear()
        for key, item in pairs:
            value[sys.intern(key)] = _interned(item)
    else:
        value[:] = [_interned(item) for item in value]


def _interned(item: Any) -> Any:
    if isinstance(item, dict | list):
        _intern(item)
    elif isinstance(item, str) and len(item) <= _INTERNED_LENGTH:
        return sys.intern(item)
    return item


def _same_version(a: JSON, b: JSON) -> bool:
    return bool(a["metadata"].get("resourceVersion")) and (
        a["metadata"].get("resourceVersion") == b["metadata"].get("resourceVersion"))


_DELETED_KEPT = 4096
_ECHOES_KEPT = 16


def _revision(obj: JSON) -> int:
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, ValueError):
        return 0


def _newer(a: JSON, b: JSON) -> bool:
    """Whether `a` is a later version than `b` (resourceVersions are etcd revisions here)."""
    try:
        return int(a["metadata"]["resourceVersion"]) >= int(b["metadata"]["resourceVersion"])
    except (KeyError, ValueError):
        return True


class Backoff:
    """Exponential backoff with jitter whose count starts over after `reset_after`
    seconds without failure (measured from when the connection was last up)."""

    def __init__(self, *, initial: float, maximum: float, reset_after: float) -> None:
        self._wait = wait_exponential_jitter(initial=initial, max=maximum)
        self._reset_after = reset_after
        self._attempt = 0
        self._up_since: float | None = None

    def up(self, now: float) -> None:
        """The connection works (again)."""
        if self._up_since is None:
            self._up_since = now

    def failed(self, now: float) -> float:
        """Seconds to wait before the next attempt."""
        if self._up_since is not None and now - self._up_since >= self._reset_after:
            self._attempt = 0
        self._up_since = None
        self._attempt += 1
        return float(self._wait(_RetryState(self._attempt)))  # type: ignore[arg-type]

    def reset(self) -> None:
        self._attempt = 0


@dataclass
class _RetryState:
    """The one attribute of tenacity's RetryCallState that its wait policies read."""

    attempt_number: int


def _describe(error: BaseException) -> str:
    status = status_of(error)
    if status:
        return f"HTTP {status}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
