"""The one claim rule: managedBy, namespaces and the label selector, and why not."""

from __future__ import annotations

from typing import Any

from devkit.factories import trainjob
from dispatcher.api.trainer import MANAGED_BY_MULTIKUEUE
from dispatcher.claim import Claim
from dispatcher.config import ClaimConfig
from dispatcher.kinds.trainjob import TrainJobKind
from dispatcher.observability.jobstate import STATE_NOT_CLAIMED, job_state

CLAIM = Claim(ClaimConfig(namespaces=["team"], label_selector="queue in (gpu,cpu)"))


def job(namespace: str = "team", *, managed_by: str | None = MANAGED_BY_MULTIKUEUE,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    obj = trainjob("j", namespace, managed_by=managed_by)
    obj["metadata"]["labels"] = labels or {}
    return obj


def test_a_job_is_claimed_when_all_three_agree() -> None:
    assert CLAIM.claims(job(labels={"queue": "gpu"}))
    assert CLAIM.refusal(job(labels={"queue": "gpu"})) == ""


def test_each_part_of_the_rule_says_why_it_refuses() -> None:
    assert CLAIM.refusal(job(managed_by=None, labels={"queue": "gpu"})) == (
        f"spec.managedBy is not {MANAGED_BY_MULTIKUEUE}")
    assert CLAIM.refusal(job("other", labels={"queue": "gpu"})) == (
        "namespace other is not in claim.namespaces")
    assert CLAIM.refusal(job(labels={"queue": "tpu"})) == (
        "its labels do not match claim.labelSelector 'queue in (gpu,cpu)'")


def test_the_default_rule_claims_managed_by_in_any_namespace() -> None:
    claim = Claim(ClaimConfig())
    assert claim.claims(job("anywhere"))
    assert not claim.claims(job(managed_by=None))


def test_people_see_an_unclaimed_job_as_not_claimed_with_the_reason() -> None:
    state = job_state(job(labels={"queue": "tpu"}), claim=CLAIM, kind=TrainJobKind(),
                      placed_on="")
    assert (state.state, state.message) == (
        STATE_NOT_CLAIMED, "its labels do not match claim.labelSelector 'queue in (gpu,cpu)'")
