"""The placement records (Placement objects) from their cache, found by job key or UID.

A view over the informer of the dispatcher's namespace: `of_job(key)` gives the record
of whichever job last had that namespace/name (a job deleted and re-created under the
same name has the old job's record until it is cleaned up), `of_uid(uid)` the record of
one job. Writes made by this process go into the cache at once through `remember` and
`forget`, as for the manager's TrainJobs.
"""

from __future__ import annotations

from typing import Any

from dispatcher.api.placement import PlacementRecord, record_of
from dispatcher.kube.informer import DELETED, Informer

JSON = dict[str, Any]


class PlacementRecords:
    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self._by_key: dict[str, set[str]] = {}
        """Job key -> the UIDs of the records made for jobs of that name."""
        informer.add_handler(self._on_event)

    def _on_event(self, event_type: str, obj: JSON) -> None:
        record = record_of(obj)
        if event_type == DELETED:
            self._unindex(record)
        else:
            self._by_key.setdefault(record.key, set()).add(record.uid)

    def _unindex(self, record: PlacementRecord) -> None:
        uids = self._by_key.get(record.key)
        if uids is not None:
            uids.discard(record.uid)
            if not uids:
                del self._by_key[record.key]

    def _cache_key(self, uid: str) -> str:
        return f"{self.informer.namespace}/{uid}"

    def of_uid(self, uid: str) -> PlacementRecord | None:
        obj = self.informer.get(self._cache_key(uid))
        return record_of(obj) if obj is not None else None

    def of_job(self, key: str) -> list[PlacementRecord]:
        """The records of the jobs named `key` (normally one)."""
        return [record for uid in sorted(self._by_key.get(key, ()))
                if (record := self.of_uid(uid)) is not None]

    def all(self) -> list[PlacementRecord]:
        return [record_of(obj) for obj in self.informer.store.values()]

    def remember(self, obj: JSON) -> None:
        self.informer.remember(obj)
        self._on_event("MODIFIED", obj)

    def forget(self, record: PlacementRecord) -> None:
        self.informer.forget(self._cache_key(record.uid))
        self._unindex(record)
