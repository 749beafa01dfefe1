"""Demand validation: nothing negative, malformed or absurd reaches the ledger."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devkit.factories import trainjob
from dispatcher.api import constants as c
from dispatcher.kinds.trainjob_demand import DemandError, trainjob_demand
from dispatcher.placement.ledger import Booking, Ledger, LedgerError
from dispatcher.placement.quantity import QuantityError, parse_quantity
from dispatcher.placement.validation import MAX_AMOUNT, checked_vector_text
from tests.unit.test_demand import container, replicated, runtime

TORCH = runtime(replicated("node", step="trainer", containers=[container("node", cpu="1")]))
SUFFIXES = ["", "m", "k", "M", "G", "E", "Ki", "Mi", "Gi", "Ei", "e3", "e-3", "e40", "e100"]

numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=4).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
quantity_texts = st.one_of(
    st.tuples(numbers, st.sampled_from(SUFFIXES)).map("".join),
    st.text(max_size=80),
    st.integers(min_value=-(10**40), max_value=10**40),
)


def _expected(text: object) -> Fraction | None:
    """The exact amount when `text` is a valid, sane quantity, else None."""
    try:
        amount = parse_quantity(text)  # type: ignore[arg-type]
    except QuantityError:
        return None
    return amount if 0 <= amount <= MAX_AMOUNT else None


@given(cpu=quantity_texts, nodes=st.integers(min_value=1, max_value=64))
def test_resources_per_node_is_valid_or_named_invalid(cpu: Any, nodes: int) -> None:
    job = trainjob("j", "ns", num_nodes=nodes, resources_per_node={"requests": {"cpu": cpu}})
    expected = _expected(cpu)
    try:
        demand = trainjob_demand(job, TORCH)
    except DemandError as error:
        assert error.reason == c.REASON_INVALID_RESOURCES
        if expected is None:
            assert "spec.trainer.resourcesPerNode.requests[cpu]" in str(error)
        else:
            assert expected * nodes * (1 + Fraction(1, 2**51)) > MAX_AMOUNT
            assert "can hold" in str(error)
        return
    assert expected is not None
    if isinstance(cpu, int) and cpu >= 2**53:
        # The TrainJob models carry JSON numbers as floats: a huge one is rounded up,
        # never down, so the booking is never less than the request.
        assert expected * nodes <= demand["cpu"] <= expected * nodes * (1 + Fraction(1, 2**51))
    else:
        assert demand.get("cpu", 0) == expected * nodes
    assert all(amount >= 0 for amount in demand.values())


@given(memory=quantity_texts, overhead=quantity_texts, replicas=st.integers(-3, 5))
def test_runtime_quantities_and_counts_are_checked(memory: Any, overhead: Any,
                                                   replicas: int) -> None:
    rt = runtime(
        replicated("node", step="trainer", containers=[container("node", cpu="1")]),
        replicated("eval", replicas=replicas,
                   containers=[{"name": "eval", "image": "x",
                                "resources": {"limits": {"memory": memory}}}]))
    rt["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"][
        "spec"]["overhead"] = {"memory": overhead}
    try:
        demand = trainjob_demand(trainjob("j", "ns"), rt)
    except DemandError as error:
        assert error.reason == c.REASON_INVALID_RESOURCES
        # Either a field is wrong, or each is fine and together they are too large.
        assert ("ClusterTrainingRuntime 'r' spec.template.spec.replicatedJobs[eval]"
                in str(error) or str(error).startswith("the job: needs ")), str(error)
        if str(error).startswith("the job: needs "):
            return
        assert replicas < 1 or _expected(memory) is None or _expected(overhead) is None
        return
    assert replicas >= 1
    memory_amount, overhead_amount = _expected(memory), _expected(overhead)
    assert memory_amount is not None and overhead_amount is not None
    exact = replicas * (memory_amount + overhead_amount)
    if any(isinstance(v, int) and v >= 2**53 for v in (memory, overhead)):
        # A huge JSON integer reaches the models as a float, rounded up, never down.
        assert exact <= demand["memory"] <= exact * (1 + Fraction(1, 2**51))
    else:
        assert demand.get("memory", 0) == exact


@pytest.mark.parametrize(("nodes", "message"), [
    (0, "spec.trainer.numNodes: 0 must be at least 1"),
    (-2, "spec.trainer.numNodes: -2 must be at least 1"),
])
def test_num_nodes_below_one_is_invalid(nodes: int, message: str) -> None:
    with pytest.raises(DemandError, match=message) as caught:
        trainjob_demand(trainjob("j", "ns", num_nodes=nodes), TORCH)
    assert caught.value.reason == c.REASON_INVALID_RESOURCES


@pytest.mark.parametrize(("value", "problem"), [
    ("-1", "'-1' is negative"), ("1e100", "exponent beyond"), ("NaN", "not a quantity"),
    ("1" * 80, "longer than 64"), ("99999999999999999999", "larger than any cluster"),
    ("1.5.5", "not a quantity"),
])
def test_each_bad_quantity_says_what_is_wrong(value: str, problem: str) -> None:
    job = trainjob("j", "ns", resources_per_node={"limits": {"nvidia.com/gpu": value}})
    with pytest.raises(DemandError, match=problem):
        trainjob_demand(job, TORCH)


def test_total_beyond_any_cluster_is_invalid_even_when_each_part_is_sane() -> None:
    job = trainjob("j", "ns", num_nodes=2**40,
                   resources_per_node={"requests": {"memory": "4Ei"}})
    with pytest.raises(DemandError, match="more than any cluster can hold"):
        trainjob_demand(job, TORCH)


def test_depends_on_missing_or_cyclic_is_an_invalid_runtime() -> None:
    missing = runtime(replicated("node", step="trainer", depends_on=["ghost"]))
    with pytest.raises(DemandError, match="'ghost' is not a replicated job") as caught:
        trainjob_demand(trainjob("j", "ns"), missing)
    assert caught.value.reason == c.REASON_INVALID_RUNTIME
    cyclic = runtime(replicated("a", depends_on=["node"]),
                     replicated("node", step="trainer", depends_on=["a"]))
    with pytest.raises(DemandError, match="dependsOn cycle"):
        trainjob_demand(trainjob("j", "ns"), cyclic)


@given(st.text(max_size=60))
def test_demand_annotation_text_never_yields_a_negative_amount(text: str) -> None:
    try:
        vector = checked_vector_text(text, path="annotation")
    except DemandError:
        return
    assert all(amount >= 0 for amount in vector.values())


def test_ledger_refuses_negative_bookings_and_overbooking() -> None:
    ledger = Ledger()
    with pytest.raises(LedgerError, match="negative"):
        ledger.book(Booking("u1", "ns/a", "w", {"cpu": Fraction(-1)}))
    quota = {"cpu": Fraction(8)}
    ledger.book(Booking("u1", "ns/a", "w", {"cpu": Fraction(6)}), quota=quota)
    with pytest.raises(LedgerError, match="would exceed its quota"):
        ledger.book(Booking("u2", "ns/b", "w", {"cpu": Fraction(3)}), quota=quota)
    # Re-booking the same job replaces it rather than adding to it.
    ledger.book(Booking("u1", "ns/a", "w", {"cpu": Fraction(8)}), quota=quota)
    assert ledger.used("w") == {"cpu": Fraction(8)}
    assert ledger.violations({"w": quota}) == []
    assert ledger.violations({"w": {"cpu": Fraction(4)}}) == ["w: 8 cpu booked, quota 4"]
