"""The status view: queue order and positions, paging, counts, quota bars, and its size."""

from __future__ import annotations

import json
import time
from fractions import Fraction
from typing import Any

from devkit.factories import condition, trainjob
from dispatcher.api import constants as c
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE
from dispatcher.claim import Claim
from dispatcher.config import ClaimConfig
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.observability.statusview import (
    activity_from_event,
    build_view,
    worker_row,
    worker_row_from_object,
)
from dispatcher.placement.scheduler import PendingJob, WorkerView, schedule

RULES: dict[str, Any] = {"claim": Claim(ClaimConfig()), "kind": TrainJobKind()}


def job(name: str, *, namespace: str = "team", created: str = "2026-12-01T10:00:00Z",
        reason: str | None = None, running: bool = False,
        final: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    obj = trainjob(name, namespace, managed_by=MANAGED_BY_MULTIKUEUE)
    obj["metadata"]["uid"] = f"uid-{name}"
    if labels:
        obj["metadata"]["labels"] = labels
    obj["metadata"]["creationTimestamp"] = created
    conditions = []
    if reason is not None:
        conditions.append(condition(c.CONDITION_DISPATCHED, reason,
                                    f"because {name} (position 9 in the queue)", "False"))
    if final is not None:
        conditions.append(condition(final, "AllJobsCompleted", "done"))
    status: dict[str, Any] = {"conditions": conditions} if conditions else {}
    if running:
        status["jobsStatus"] = [{"name": "node", "active": 1, "ready": 1}]
    if status:
        obj["status"] = status
    return obj


def records(**workers: str) -> dict[str, str]:
    """What the Placement records say: job UID -> worker, for the jobs named."""
    return {f"uid-{name}": worker for name, worker in workers.items()}


def test_the_queue_is_in_scheduler_order_with_positions_and_held_jobs_apart() -> None:
    jobs = [
        job("late", created="2026-12-01T10:05:00Z", reason=c.REASON_WAITING_FOR_QUOTA),
        job("early", created="2026-12-01T10:01:00Z", reason=c.REASON_WAITING_FOR_QUOTA),
        job("urgent", created="2026-12-01T10:09:00Z", reason=c.REASON_NO_ACTIVE_WORKER),
        job("new"),
        job("huge", reason=c.REASON_UNSCHEDULABLE),
        job("running", running=True),
        job("done", final="Complete"),
        trainjob("someone-elses", "team"),
    ]
    view = build_view(workers=[], jobs=jobs, **RULES, priorities={"team/urgent": 100},
                      placements=records(running="worker-a", done="worker-b"))
    assert [(r.position, r.name) for r in view.queue.items] == [
        (1, "urgent"), (2, "early"), (3, "late")]
    assert view.queue.items[0].state == c.REASON_NO_ACTIVE_WORKER
    assert view.queue.items[2].message == "because late"  # the stale position is cut off
    assert [r.name for r in view.placed.items] == ["running"]
    assert view.placed.items[0].worker == "worker-a"
    # Not yet judged by the scheduler, or never fits: no place in the queue.
    assert [r.name for r in view.others.items] == ["huge", "new", "done"]
    assert view.by_state == {"Complete": 1, "NoActiveWorker": 1, "Pending": 1, "Running": 1,
                             "Unschedulable": 1, "WaitingForQuota": 2}
    assert view.by_reason == {"NoActiveWorker": 1, "Pending": 1, "Unschedulable": 1,
                              "WaitingForQuota": 2}
    assert view.by_namespace == {"team": 7}


def test_the_view_shows_only_what_the_claim_rule_claims() -> None:
    claim = Claim(ClaimConfig(namespaces=["team"], label_selector="queue=gpu"))
    waiting = c.REASON_WAITING_FOR_QUOTA
    jobs = [job("ours", labels={"queue": "gpu"}, reason=waiting),
            job("unlabelled", reason=waiting),
            job("elsewhere", namespace="other", labels={"queue": "gpu"}, reason=waiting)]
    view = build_view(workers=[], jobs=jobs, claim=claim, kind=TrainJobKind())
    assert [r.name for r in view.queue.items] == ["ours"]
    assert view.by_state == {waiting: 1} and view.by_namespace == {"team": 1}


def test_the_queue_shown_is_the_schedulers_own_members_and_order() -> None:
    """The jobs the scheduler gives a position are the page's queue, in its order; those
    it judges otherwise (never fits, no worker has the runtime, refused) are not."""
    workers = [WorkerView(name="a", quota={"cpu": Fraction(4)}, used={"cpu": Fraction(4)}),
               WorkerView(name="off", quota={"cpu": Fraction(16)}, active=False)]
    pending = [
        PendingJob(key="team/quota", uid="1", demand={"cpu": Fraction(2)}, created="t1"),
        PendingJob(key="team/first", uid="2", demand={"cpu": Fraction(1)}, priority=5,
                   created="t3"),
        PendingJob(key="team/offline", uid="3", demand={"cpu": Fraction(8)}, created="t2"),
        PendingJob(key="team/huge", uid="4", demand={"cpu": Fraction(99)}, created="t0"),
        PendingJob(key="team/nowhere", uid="5", demand={"cpu": Fraction(1)}, created="t0",
                   missing_on={"a": "has no runtime", "off": "has no runtime"}),
        PendingJob(key="team/refused", uid="6", demand={"cpu": Fraction(1)}, created="t0",
                   excluded=frozenset({"a", "off"})),
    ]
    decisions = schedule(pending, workers)
    assert {d.reason for d in decisions} >= {
        c.REASON_WAITING_FOR_QUOTA, c.REASON_NO_ACTIVE_WORKER, c.REASON_UNSCHEDULABLE,
        c.REASON_RUNTIME_NOT_FOUND, c.REASON_MIRROR_REJECTED}
    created = {p.key: p.created for p in pending}
    jobs = [job(d.key.split("/")[1], reason=d.reason, created=created[d.key])
            for d in decisions]
    view = build_view(workers=[], jobs=jobs, **RULES,
                      priorities={p.key: p.priority for p in pending})
    by_position = sorted((d.position, d.key.split("/")[1]) for d in decisions if d.position)
    assert [(r.position, r.name) for r in view.queue.items] == by_position
    assert [r.name for r in view.queue.items] == ["first", "quota", "offline"]


def test_a_job_whose_pods_are_ready_runs_as_the_kind_says() -> None:
    ready = job("ready")
    ready["status"] = {"jobsStatus": [{"name": "node", "active": 0, "ready": 1}]}
    view = build_view(workers=[], jobs=[ready], **RULES, placements=records(ready="worker-a"))
    assert [(r.name, r.state) for r in view.placed.items] == [("ready", "Running")]


def test_where_a_job_runs_is_the_records_word_not_the_annotation_a_user_writes() -> None:
    """The `cluster` annotation is the job's view for kubectl, which anyone who may edit
    the job can write: a job with no record is not placed whatever it says."""
    forged = job("forged", reason=c.REASON_WAITING_FOR_QUOTA)
    forged["metadata"]["annotations"] = {c.ANNOTATION_CLUSTER: "worker-a"}
    moved = job("moved")
    moved["metadata"]["annotations"] = {c.ANNOTATION_CLUSTER: "worker-a"}
    view = build_view(workers=[], jobs=[forged, moved], **RULES,
                      placements=records(moved="worker-b"))
    assert [(r.name, r.worker) for r in view.placed.items] == [("moved", "worker-b")]
    assert [(r.name, r.worker, r.state) for r in view.queue.items] == [
        ("forged", "", c.REASON_WAITING_FOR_QUOTA)]


def test_the_queue_is_paged_and_namespaces_summarised() -> None:
    jobs = [job(f"j{i:03d}", namespace=f"ns{i % 30:02d}", created=f"2026-12-01T10:{i // 60:02d}:"
                f"{i % 60:02d}Z", reason=c.REASON_WAITING_FOR_QUOTA) for i in range(120)]
    view = build_view(workers=[], jobs=jobs, **RULES, offset=50, limit=20)
    assert view.queue.total == 120 and view.queue.offset == 50
    assert [r.position for r in view.queue.items] == list(range(51, 71))
    assert view.queue.items[0].name == "j050"
    assert len(view.by_namespace) == 21 and view.by_namespace["(other)"] == 40


def test_worker_bars_from_a_status_and_from_an_object_agree() -> None:
    status = {"conditions": [{"type": c.CONDITION_ACTIVE, "status": "False",
                              "reason": c.REASON_UNREACHABLE, "message": "timed out"}],
              "quota": {"cpu": "8", "nvidia.com/gpu": "4"},
              "used": {"cpu": "6", "nvidia.com/gpu": "4", "memory": "1Gi"},
              "free": {"cpu": "2", "nvidia.com/gpu": "0"}, "mirrors": 3}
    row = worker_row("worker-a", {"cordoned": True}, status)
    assert (row.active, row.reason, row.mirrors, row.flags) == (
        "False", c.REASON_UNREACHABLE, 3, "cordoned")
    bars = {b.resource: b for b in row.resources}
    assert bars["cpu"].used_fraction == 0.75 and bars["cpu"].free == "2"
    assert bars["nvidia.com/gpu"].used_fraction == 1.0
    assert bars["memory"].quota is None and bars["memory"].used_fraction is None
    obj = {"metadata": {"name": "worker-a"}, "spec": {"cordoned": True}, "status": status}
    assert worker_row_from_object(obj) == row


def test_recent_activity_is_newest_first_and_capped() -> None:
    events = [{"eventTime": f"2026-12-01T10:00:{s:02d}.000000Z", "reason": c.REASON_PLACED,
               "note": f"mirror created on worker-a ({s})", "type": "Normal",
               "regarding": {"namespace": "team", "name": f"j{s}"}} for s in range(30)]
    view = build_view(workers=[], jobs=[], **RULES, events=events, recent=5)
    assert [a.name for a in view.recent] == ["j29", "j28", "j27", "j26", "j25"]
    assert activity_from_event(events[0]).message == "mirror created on worker-a (0)"


def test_ten_thousand_jobs_make_a_small_view_quickly() -> None:
    jobs, placements = [], {}
    for i in range(10_000):
        created = f"2026-12-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
        if i % 4 == 0:
            jobs.append(job(f"run-{i}", namespace=f"ns{i % 50}", created=created,
                            running=True))
            placements[f"uid-run-{i}"] = f"worker-{i % 3}"
        else:
            jobs.append(job(f"wait-{i}", namespace=f"ns{i % 50}", created=created,
                            reason=c.REASON_WAITING_FOR_QUOTA))
    workers = [worker_row(f"worker-{i}", {}, {"quota": {"cpu": "64"}, "used": {"cpu": "60"}})
               for i in range(3)]
    started = time.perf_counter()
    view = build_view(workers=workers, jobs=jobs, **RULES, placements=placements)
    body = json.dumps(view.to_json(), separators=(",", ":"))
    elapsed = time.perf_counter() - started
    assert view.queue.total == 7500 and view.placed.total == 2500
    assert len(view.queue.items) == 50
    assert len(body) < 40_000, len(body)
    assert elapsed < 2.0, elapsed
