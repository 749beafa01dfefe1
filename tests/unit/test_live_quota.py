"""A worker's live Kueue quota and how it combines with the ledger."""

from __future__ import annotations

from fractions import Fraction

from dispatcher.placement.capacity import capacity
from dispatcher.placement.live_quota import cluster_queue_quota, effective_quota

F = Fraction


def test_cluster_queue_sums_flavors() -> None:
    queue = {
        "spec": {"resourceGroups": [
            {"flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu",
                                                          "nominalQuota": 8}]},
                         {"name": "h100", "resources": [{"name": "nvidia.com/gpu",
                                                          "nominalQuota": "4"}]}]},
            {"flavors": [{"name": "default", "resources": [{"name": "cpu",
                                                             "nominalQuota": "500m"}]}]},
        ]},
        "status": {"flavorsUsage": [{"name": "a100", "resources": [
            {"name": "nvidia.com/gpu", "total": "3"}]}]},
    }
    assert cluster_queue_quota(queue) == ({"nvidia.com/gpu": F(12), "cpu": F(1, 2)},
                                          {"nvidia.com/gpu": F(3)})
    assert cluster_queue_quota({}) == ({}, {})


def test_effective_quota_is_the_smaller_of_declared_and_live() -> None:
    assert effective_quota(None, None) is None
    assert effective_quota({"cpu": F(8)}, None) == {"cpu": F(8)}
    assert effective_quota(None, {"cpu": F(4)}) == {"cpu": F(4)}
    assert effective_quota({"cpu": F(8), "memory": F(1)}, {"cpu": F(4), "gpu": F(2)}) == {
        "cpu": F(4)}


def test_capacity_counts_others_once_and_ours_once() -> None:
    booked = {"cpu": F(3)}
    alone = capacity(declared={"cpu": F(8)}, live_quota=None, live_used=None, booked=booked,
                     booked_running={})
    assert (alone.used, alone.free) == ({"cpu": F(3)}, {"cpu": F(5)})
    # Others use 2; of ours (3), 1 runs and is already in the live usage of 3.
    shared = capacity(declared=None, live_quota={"cpu": F(10)}, live_used={"cpu": F(3)},
                      booked=booked, booked_running={"cpu": F(1)})
    assert shared.used_by_us == {"cpu": F(3)} and shared.used_by_others == {"cpu": F(2)}
    assert shared.free == {"cpu": F(5)}
    # Live usage lagging behind what runs never makes others' usage negative.
    lagging = capacity(declared=None, live_quota={"cpu": F(10)}, live_used={"cpu": F(0)},
                       booked=booked, booked_running={"cpu": F(2)})
    assert lagging.used_by_others == {} and lagging.free == {"cpu": F(7)}
