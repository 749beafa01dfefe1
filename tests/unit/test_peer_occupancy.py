"""The peer benchmark's notion of a running copy and of a job running on two workers."""

from __future__ import annotations

from typing import Any

from bench.peer.occupancy import Occupancy, is_running
from dispatcher.kube.informer import ADDED, DELETED, MODIFIED


def _job(*, suspend: bool = False, finished: str = "") -> dict[str, Any]:
    conditions = [{"type": finished, "status": "True"}] if finished else []
    return {"metadata": {"name": "j"}, "spec": {"suspend": suspend},
            "status": {"conditions": conditions}}


def test_a_copy_runs_when_present_unsuspended_and_unfinished() -> None:
    assert is_running(ADDED, _job())
    assert not is_running(ADDED, _job(suspend=True))
    assert not is_running(MODIFIED, _job(finished="Complete"))
    assert not is_running(MODIFIED, _job(finished="Failed"))
    assert not is_running(DELETED, _job())


def test_two_workers_at_once_are_counted_once_and_apart_after_the_thaw() -> None:
    occupancy = Occupancy({}, "bench")  # no clients: no watches, events fed by hand
    occupancy.per_worker = {"a": 0, "b": 0}
    occupancy.max_per_worker = {"a": 0, "b": 0}
    occupancy._update("a", "j", True)
    occupancy._update("b", "j", True)  # moved while "a" is frozen: its copy still runs
    occupancy._update("b", "j", True)  # no change, no double count
    assert occupancy.on_two_or_more() == ["j"]
    assert set(occupancy.twice) == {"j"} and occupancy.max_total == 2
    occupancy.thawed()
    assert occupancy.twice_after_thaw == {"j"}
    occupancy._update("a", "j", False)  # the stale copy is collected
    assert occupancy.on_two_or_more() == [] and occupancy.total == 1
    assert occupancy.max_per_worker == {"a": 1, "b": 1}


def test_every_stop_of_a_running_copy_is_logged_with_its_worker() -> None:
    occupancy = Occupancy({}, "bench")
    occupancy.per_worker = {"a": 0, "b": 0}
    occupancy.max_per_worker = {"a": 0, "b": 0}
    occupancy._update("a", "j", False)  # never ran there: no stop
    occupancy._update("a", "j", True)
    occupancy._update("a", "j", False)  # suspended (preempted)
    occupancy._update("a", "j", False)  # then deleted: the same stop
    occupancy._update("b", "j", True)
    occupancy._update("b", "j", False)
    assert [(job, worker) for _, job, worker in occupancy.stopped] == [("j", "a"), ("j", "b")]
    assert occupancy.total == 0
