"""The placement as `kubectl` sees it on the job: annotations and finalizer, from the record.

The manager TrainJob shows where it runs in the annotations `dispatcher.trainjob.io/
cluster`, `demand` and `evictions`, and holds the finalizer while it is placed. Anyone who
may edit the job can change them, so they are a view of the Placement record, never read
back as the truth: `differences` says what a job's view has that the record does not, and
`desired_view` what it should be. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dispatcher.api import constants as c
from dispatcher.api.placement import PlacementRecord
from dispatcher.placement import resources

JSON = dict[str, Any]


@dataclass(frozen=True)
class View:
    annotations: dict[str, str | None]
    """Each view annotation's value; None means absent."""
    finalizer: bool


def desired_view(record: PlacementRecord | None) -> View:
    placed = record if record is not None and record.placed else None
    evictions = record.evictions if record is not None else 0
    return View(annotations={
        c.ANNOTATION_CLUSTER: placed.worker if placed else None,
        c.ANNOTATION_DEMAND: resources.format_vector(placed.demand) if placed else None,
        c.ANNOTATION_EVICTIONS: str(evictions) if evictions else None,
    }, finalizer=placed is not None)


def differences(job: JSON, record: PlacementRecord | None) -> list[str]:
    """What differs between the job's view and `record`, in words; empty when equal."""
    want = desired_view(record)
    annotations = job["metadata"].get("annotations") or {}
    found = []
    for name, value in want.annotations.items():
        have = annotations.get(name)
        if have != value:
            found.append(f"annotation {name} was {have!r}, the record says {value!r}"
                         if value is not None else f"annotation {name} was {have!r}, "
                         "the record has none")
    has_finalizer = c.FINALIZER in (job["metadata"].get("finalizers") or [])
    if has_finalizer != want.finalizer:
        found.append(f"finalizer {c.FINALIZER} was "
                     + ("missing on a placed job" if want.finalizer else
                        "set on a job that is not placed"))
    return found
