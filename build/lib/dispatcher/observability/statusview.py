"""What a person sees of the dispatcher: workers, quota bars, the queue, recent activity.

One pure function, `build_view`, turns plain objects into the view that the status page
(`GET /api/status`, drawn by `static/status.js`), `dispatcher jobs` and
`dispatcher cluster list` all show, so the three never disagree:
- workers come as a name, spec flags and a status in the WorkerCluster status shape;
  the CLI passes what it lists, the page what the dispatcher would write right now;
- jobs are the manager's TrainJob objects (the CLI's list, the page's cache): those
  the one claim rule (`dispatcher.claim`) claims, read through `job_state`, the
  one-line story the demo and the CLI also tell;
- activity is the dispatcher's Events (`events.k8s.io/v1`): listed by the CLI, kept in
  memory by the page.

The queue is the scheduler's: its members are the jobs whose Dispatched reason the
scheduler counts as a place in it (`placement.scheduler.in_queue`), in its own order
(`queue_order`: priority, then creation time, then key). A view holds one page of it
and of the placed jobs, plus counts per state, reason and namespace, so it stays small
with 10,000 jobs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from dispatcher.api import constants as c
from dispatcher.claim import Claim
from dispatcher.kinds import JobKind
from dispatcher.kube.informer import object_key
from dispatcher.observability import jobstate as js
from dispatcher.observability.jobstate import JobLine, job_state
from dispatcher.placement.quantity import QuantityError, parse_quantity
from dispatcher.placement.scheduler import in_queue, queue_order

JSON = dict[str, Any]
PLACED_STATES = frozenset({js.STATE_PLACED, js.STATE_RUNNING})
_POSITION_NOTE = re.compile(r" \(position \d+ in the queue\)$")
"""The position the Dispatched message had when written; the view gives the current one."""
TOP_NAMESPACES = 20
"""Namespaces counted by name; the rest are summed under `(other)`."""


@dataclass(frozen=True)
class ResourceBar:
    resource: str
    quota: str | None
    used: str
    free: str | None
    used_fraction: float | None
    """used / quota, capped to 1; None without a quota (unlimited)."""
    used_by_others: str = "0"
    """Held by jobs that are not this dispatcher's (on the worker's Kueue); in `used`."""


@dataclass(frozen=True)
class WorkerRow:
    name: str
    active: str
    reason: str
    message: str
    mirrors: int
    cordoned: bool
    drain: bool
    resources: list[ResourceBar]

    @property
    def flags(self) -> str:
        return ", ".join(f for f, on in (("cordoned", self.cordoned), ("drain", self.drain))
                         if on) or "-"


@dataclass(frozen=True)
class JobRow:
    namespace: str
    name: str
    worker: str
    state: str
    message: str
    position: int | None = None
    """1-based place in the queue, for queued jobs."""


@dataclass(frozen=True)
class Activity:
    time: str
    reason: str
    type: str
    namespace: str
    name: str
    message: str


@dataclass(frozen=True)
class Page:
    total: int
    offset: int
    items: list[JobRow]


@dataclass(frozen=True)
class StatusView:
    workers: list[WorkerRow]
    queue: Page
    placed: Page
    others: Page
    """Claimed jobs neither queued nor placed: held (Unschedulable, Suspended, ...) or
    finished."""
    by_state: dict[str, int]
    by_reason: dict[str, int]
    """Why queued and held jobs wait: the Dispatched condition's reason."""
    by_namespace: dict[str, int]
    recent: list[Activity] = field(default_factory=list)

    def to_json(self) -> JSON:
        data = asdict(self)
        for row, obj in zip(data["workers"], self.workers, strict=True):
            row["flags"] = obj.flags
        return data


def _fraction(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except (QuantityError, TypeError, ValueError):
        return None


def _bar(resource: str, quota: Any, used: Any, free: Any, others: Any = None) -> ResourceBar:
    share = None
    q, u = _fraction(quota), _fraction(used if used is not None else "0")
    if q is not None and u is not None:
        share = 1.0 if q <= 0 < u else (0.0 if q <= 0 else min(float(u / q), 1.0))
    return ResourceBar(resource, None if quota is None else str(quota),
                       "0" if used is None else str(used),
                       None if free is None else str(free), share,
                       "0" if others is None else str(others))


def worker_row(name: str, spec: Mapping[str, Any], status: Mapping[str, Any]) -> WorkerRow:
    """A worker from its spec flags and its status (the WorkerCluster status shape)."""
    active: Mapping[str, Any] = next(
        (x for x in status.get("conditions") or [] if x.get("type") == c.CONDITION_ACTIVE), {})
    quota = status.get("quota") or spec.get("quota") or {}
    used = status.get("used") or {}
    free = status.get("free") or {}
    others = status.get("usedByOthers") or {}
    bars = [_bar(r, quota.get(r), used.get(r), free.get(r), others.get(r))
            for r in sorted(set(quota) | set(used))]
    return WorkerRow(
        name=name, active=str(active.get("status", "Unknown")),
        reason=str(active.get("reason", "")), message=str(active.get("message", "")),
        mirrors=int(status.get("mirrors") or 0), cordoned=bool(spec.get("cordoned")),
        drain=bool(spec.get("drain")), resources=bars,
    )


def worker_row_from_object(obj: Mapping[str, Any]) -> WorkerRow:
    """A worker from its WorkerCluster object, as the CLI lists it."""
    return worker_row(obj["metadata"]["name"], obj.get("spec") or {}, obj.get("status") or {})


def activity_from_event(event: Mapping[str, Any]) -> Activity:
    """One line of activity from an `events.k8s.io/v1` Event the dispatcher wrote."""
    regarding = event.get("regarding") or {}
    return Activity(
        time=str(event.get("eventTime") or ""), reason=str(event.get("reason", "")),
        type=str(event.get("type", "Normal")),
        namespace=str(regarding.get("namespace") or ""), name=str(regarding.get("name", "")),
        message=str(event.get("note", "")),
    )


def _dispatched_reason(job: Mapping[str, Any]) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == c.CONDITION_DISPATCHED:
            return str(cond.get("reason", ""))
    return ""


def _row(job: Mapping[str, Any], state: JobLine, position: int | None = None) -> JobRow:
    metadata = job["metadata"]
    return JobRow(str(metadata.get("namespace", "")), str(metadata["name"]), state.worker,
                  state.state, _POSITION_NOTE.sub("", state.message), position)


def _page(entries: list[tuple[Any, Mapping[str, Any], JobLine]], offset: int,
          limit: int | None, *, numbered: bool = False) -> Page:
    """Rows of one page of `entries` in their sort order; only the page's rows are made
    (with 10,000 jobs, most are never shown)."""
    entries.sort(key=lambda entry: entry[0])
    end = None if limit is None else offset + limit
    rows = [_row(job, state, offset + i if numbered else None)
            for i, (_, job, state) in enumerate(entries[offset:end], start=1)]
    return Page(total=len(entries), offset=offset, items=rows)


def _top(counter: Counter[str], limit: int) -> dict[str, int]:
    top = dict(counter.most_common(limit))
    rest = sum(counter.values()) - sum(top.values())
    if rest:
        top["(other)"] = rest
    return top


def build_view(
    *,
    workers: Iterable[WorkerRow],
    jobs: Iterable[Mapping[str, Any]],
    claim: Claim,
    kind: JobKind,
    placements: Mapping[str, str] | None = None,
    priorities: Mapping[str, int] | None = None,
    events: Iterable[Mapping[str, Any]] = (),
    offset: int = 0,
    limit: int | None = 50,
    recent: int = 20,
) -> StatusView:
    """The whole view of the `jobs` that `claim` claims; `placements` maps a job's UID to
    the worker its Placement record names (placed jobs only), `priorities` a job key to
    its priority (default 0), `offset` and `limit` page the queue (and the other job
    lists), `recent` caps the activity."""
    priorities, placements = priorities or {}, placements or {}
    queued: list[tuple[tuple[int, str, str], Mapping[str, Any], JobLine]] = []
    placed: list[tuple[tuple[str, str, str], Mapping[str, Any], JobLine]] = []
    others: list[tuple[tuple[bool, str, str], Mapping[str, Any], JobLine]] = []
    by_state: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    by_namespace: Counter[str] = Counter()
    for job in jobs:
        if not claim.claims(job):
            continue
        state = job_state(job, claim=claim, kind=kind,
                          placed_on=placements.get(str(job["metadata"].get("uid", "")), ""))
        metadata = job["metadata"]
        namespace, name = str(metadata.get("namespace", "")), str(metadata["name"])
        by_state[state.state] += 1
        by_namespace[namespace] += 1
        if in_queue(state.state):
            key = object_key(job)
            order = queue_order(priority=priorities.get(key, 0),
                                created=str(metadata.get("creationTimestamp", "")), key=key)
            queued.append((order, job, state))
            by_reason[state.state] += 1
        elif state.state in PLACED_STATES:
            placed.append(((state.worker, namespace, name), job, state))
        else:
            others.append(((state.finished, namespace, name), job, state))
            if not state.finished:
                by_reason[_dispatched_reason(job) or state.state] += 1
    activity = sorted((activity_from_event(e) for e in events), key=lambda a: a.time,
                      reverse=True)[:recent]
    return StatusView(
        workers=sorted(workers, key=lambda w: w.name),
        queue=_page(queued, offset, limit, numbered=True), placed=_page(placed, 0, limit),
        others=_page(others, 0, limit), by_state=dict(sorted(by_state.items())),
        by_reason=dict(sorted(by_reason.items())),
        by_namespace=_top(by_namespace, TOP_NAMESPACES), recent=activity,
    )
