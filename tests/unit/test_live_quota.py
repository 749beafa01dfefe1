"""A worker's live Kueue quota and how it combines with the ledger."""

from __future__ import annotations

from fractions import Fraction

from dispatcher.placement.live_quota import cluster_queue_quota, effective_quota, effective_used

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


def test_effective_used_counts_others_once_and_ours_once() -> None:
    ledger = {"cpu": F(3)}
    assert effective_used(ledger, None) == {"cpu": F(3)}
    # Others use 2; of ours (3), 1 runs and is already in the live usage of 3.
    assert effective_used(ledger, {"cpu": F(3)}, {"cpu": F(1)}) == {"cpu": F(5)}
    # Live usage lagging behind what runs never goes negative.
    assert effective_used(ledger, {"cpu": F(0)}, {"cpu": F(2)}) == {"cpu": F(3)}
