"""The rules an amount must pass before it may reach the quota ledger.

Every quantity a demand is made of (requests, limits, `resourcesPerNode`, pod overhead)
must be a Kubernetes quantity that is non-negative and at most `MAX_AMOUNT` in base
units (the int64 range a Kubernetes quantity holds); every count (`numNodes`, replicas,
parallelism, completions) at least 1. A negative amount would free quota that other jobs
then overbook, so anything else is refused with a `DemandError` whose reason the job
shows (`InvalidResources`) and whose message names the offending field, e.g.
`spec.trainer.resourcesPerNode.requests[cpu]: "-1" is negative`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from dispatcher.api import constants as c
from dispatcher.placement import resources
from dispatcher.placement.quantity import QuantityError, format_quantity, parse_quantity

_EXACT_FLOATS = 2.0**53
"""Below this, a float holds every whole number exactly."""
MAX_AMOUNT = Fraction(2**63 - 1)
"""The largest amount of one resource in base units (cores, bytes, pods)."""


class DemandError(ValueError):
    """A job or runtime that cannot be sized; `reason` is what the job's condition shows."""

    def __init__(self, message: str, *, reason: str = c.REASON_INVALID_RUNTIME) -> None:
        super().__init__(message)
        self.reason = reason


def invalid_resources(path: str, problem: str) -> DemandError:
    return DemandError(f"{path}: {problem}", reason=c.REASON_INVALID_RESOURCES)


def checked_quantity(value: object, *, path: str) -> Fraction:
    """`value` parsed, if it is a non-negative quantity of sane size."""
    try:
        amount = parse_quantity(value)  # type: ignore[arg-type]
    except (QuantityError, TypeError) as error:
        raise invalid_resources(path, str(error)) from None
    if amount < 0:
        raise invalid_resources(path, f"{value!r} is negative")
    if isinstance(value, float) and value >= _EXACT_FLOATS:
        # A JSON number this large may have been rounded to the float: round it up.
        amount += Fraction(math.ulp(value))
    if amount > MAX_AMOUNT:
        raise invalid_resources(path, f"{value!r} is larger than any cluster can hold")
    return amount


def checked_quantities(raw: Mapping[str, object] | None, *, path: str) -> dict[str, Fraction]:
    if not raw:
        return {}
    return {name: checked_quantity(getattr(value, "actual_instance", value),
                                   path=f"{path}[{name}]")
            for name, value in raw.items()}


def checked_count(value: int | None, *, path: str, default: int) -> int:
    """A count that is unset (`default`) or at least 1."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_resources(path, f"{value!r} is not a whole number")
    if value < 1:
        raise invalid_resources(path, f"{value} must be at least 1")
    return value


def checked_total(demand: Mapping[str, Fraction], *, what: str) -> dict[str, Fraction]:
    """The total demand, refused when some resource adds up beyond `MAX_AMOUNT`."""
    for name, amount in demand.items():
        if amount > MAX_AMOUNT:
            raise invalid_resources(
                what, f"needs {format_quantity(amount)} {name} in all, more than any "
                      "cluster can hold")
    return resources.shared(demand)


def checked_vector_text(text: str, *, path: str) -> dict[str, Fraction]:
    """A `cpu=4,memory=8Gi` text (as `resources.format_vector` writes it), checked."""
    vector: dict[str, Fraction] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, separator, amount = item.partition("=")
        if not separator or not name.strip():
            raise invalid_resources(path, f"{item!r} is not name=quantity")
        vector[name.strip()] = checked_quantity(amount.strip(), path=f"{path}[{name.strip()}]")
    return vector
