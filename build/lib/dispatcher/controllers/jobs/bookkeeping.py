"""The ledger from the caches: rebuilt from the placement records at start, then kept
counting every live mirror of ours as the mirror watches report them.

Bookings follow the records: `rebuild` books every placement on record but those of
finished jobs, before anything is placed (a record whose job is gone still books its
worker until its mirror is deleted). Live mirrors are facts: every unfinished mirror of
this dispatcher's origin counts on its worker, recorded or not, at what it holds
(`SnapshotReader.held_by`), until it is deleted or finishes; a mirror that stops
counting frees room, so the scheduler looks again.
"""

from __future__ import annotations

import logging
from typing import Any

from dispatcher.api import constants as c
from dispatcher.controllers.jobs.records import PlacementRecords
from dispatcher.controllers.jobs.snapshot import SnapshotReader, uid_of
from dispatcher.controllers.scheduling import SchedulingLoop
from dispatcher.kinds import JobKind
from dispatcher.kube.informer import DELETED, Informer, object_key
from dispatcher.placement import resources
from dispatcher.placement.ledger import Booking, Ledger

log = logging.getLogger(__name__)
JSON = dict[str, Any]


class Bookkeeper:
    def __init__(self, *, kind: JobKind, origin: str, ledger: Ledger,
                 scheduling: SchedulingLoop, trainjobs: Informer, records: PlacementRecords,
                 reader: SnapshotReader) -> None:
        self._kind = kind
        self._origin = origin
        self._ledger = ledger
        self._scheduling = scheduling
        self._jobs = trainjobs
        self._records = records
        self._reader = reader

    def mirror_event(self, worker: str, event_type: str, mirror: JSON) -> None:
        """Count (or stop counting) a mirror of ours on `worker`, as a watch reports it."""
        uid = (mirror["metadata"].get("annotations") or {}).get(c.ANNOTATION_MANAGER_UID)
        if not uid or not self._kind.is_ours(mirror, manager_uid=None, origin=self._origin):
            return
        if event_type == DELETED or self._kind.finished(mirror.get("status")) is not None:
            self.mirror_gone(worker, uid)
            return
        if not self._ledger.counts_mirror(worker, uid):  # a mirror's demand never changes
            self._ledger.mirror_seen(worker, uid, object_key(mirror),
                                     self._reader.held_by(mirror, uid))

    def mirror_gone(self, worker: str, uid: str) -> None:
        if self._ledger.mirror_gone(worker, uid):
            self._scheduling.trigger()

    def rebuild(self) -> int:
        """Book every placement on record but those of finished jobs; before any
        placement. (The live mirrors are counted as the workers' caches fill.)"""
        booked = 0
        for record in self._records.all():
            if not record.placed:
                continue
            job = self._jobs.get(record.key)
            demand = record.demand
            if job is not None and uid_of(job) == record.uid:
                if self._kind.finished(job.get("status")) is not None:
                    continue
                if record.problem:
                    log.warning("%s: placement record: %s; booking its demand as computed "
                                "now", record.key, record.problem, extra={"job": record.key})
                _, runtime = self._reader.runtime_of(job)
                _, computed, _ = self._reader.demand(job, runtime, None)
                demand = resources.maximum([record.demand, computed or {}])
            self._ledger.book(Booking(record.uid, record.key, record.worker, demand))
            booked += 1
        return booked
