"""Exact Kubernetes quantity arithmetic."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.placement.quantity import QuantityError, format_quantity, parse_quantity


@pytest.mark.parametrize(("text", "expected"), [
    ("500m", Fraction(1, 2)), ("4Gi", Fraction(4 * 2**30)), ("1.5", Fraction(3, 2)),
    ("2e3", Fraction(2000)), ("100Ki", Fraction(102400)), ("1E-3", Fraction(1, 1000)),
    ("0.1", Fraction(1, 10)), ("3", Fraction(3)), ("12M", Fraction(12 * 10**6)),
    ("250u", Fraction(1, 4000)), ("-1", Fraction(-1)), (".5", Fraction(1, 2)),
    (2, Fraction(2)), (1.0, Fraction(1)), (0.1, Fraction(1, 10)),
])
def test_parse(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1Gb", "1.2.3", "Gi", "1 Gi x", "--1"])
def test_rejects_non_quantities(bad: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_tenths_add_up_exactly() -> None:
    assert sum((parse_quantity("0.1") for _ in range(10)), Fraction(0)) == 1


@pytest.mark.parametrize(("value", "text"), [
    (Fraction(4 * 2**30), "4Gi"), (Fraction(1, 2), "500m"), (Fraction(3), "3"),
    (Fraction(1500 * 2**20), "1500Mi"), (Fraction(0), "0"),
])
def test_format(value: Fraction, text: str) -> None:
    assert format_quantity(value) == text


@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(["", "m", "k", "Mi", "Gi"]))
def test_format_then_parse_is_identity(number: int, suffix: str) -> None:
    value = parse_quantity(f"{number}{suffix}")
    assert parse_quantity(format_quantity(value)) == value


@given(st.lists(st.integers(min_value=0, max_value=10**6), max_size=30))
def test_millicores_sum_like_integers(millis: list[int]) -> None:
    total = sum((parse_quantity(f"{m}m") for m in millis), Fraction(0))
    assert total == Fraction(sum(millis), 1000)
