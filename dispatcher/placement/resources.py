"""Resource vectors: exact amounts by resource name, and the arithmetic of quota.

A vector maps names (`cpu`, `memory`, `nvidia.com/gpu`, `pods`, ...) to exact amounts.
Quota semantics: a worker that declares a quota offers only the resources it names,
except `pods`, which is unlimited unless named; a worker with no quota at all is
unlimited.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from dispatcher.placement.quantity import format_quantity, parse_quantity

PODS = "pods"
Vector = Mapping[str, Fraction]


def parse_vector(raw: Mapping[str, str | int | float]) -> dict[str, Fraction]:
    """Parse a resource -> quantity mapping; raises QuantityError naming the bad entry."""
    return {name: parse_quantity(amount) for name, amount in raw.items()}


def shared(vector: Vector) -> dict[str, Fraction]:
    """The one dict of every vector equal to `vector` (with its names in the same order):
    a queue of alike jobs keeps one demand, not one each. Never changed in place (no
    vector here is: the arithmetic below makes new ones)."""
    return _shared(tuple(vector.items()))


@functools.lru_cache(maxsize=4096)
def _shared(items: tuple[tuple[str, Fraction], ...]) -> dict[str, Fraction]:
    return dict(items)


def add(*vectors: Vector) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for vector in vectors:
        for name, amount in vector.items():
            total[name] = total.get(name, Fraction(0)) + amount
    return total


def subtract(a: Vector, b: Vector) -> dict[str, Fraction]:
    result = dict(a)
    for name, amount in b.items():
        result[name] = result.get(name, Fraction(0)) - amount
    return result


def remaining(quota: Vector, used: Vector) -> dict[str, Fraction]:
    """What is left of `quota` after `used`, for the resources the quota names."""
    return {name: amount - used.get(name, Fraction(0)) for name, amount in quota.items()}


def scale(vector: Vector, factor: int) -> dict[str, Fraction]:
    return {name: amount * factor for name, amount in vector.items()}


def maximum(vectors: Iterable[Vector]) -> dict[str, Fraction]:
    """Key-by-key maximum."""
    result: dict[str, Fraction] = {}
    for vector in vectors:
        for name, amount in vector.items():
            if amount > result.get(name, Fraction(0)):
                result[name] = amount
    return result


@dataclass(frozen=True)
class Shortfall:
    """One resource a demand needs more of than is available."""

    resource: str
    needed: Fraction
    available: Fraction

    def describe(self) -> str:
        return (f"{format_quantity(self.needed)} {self.resource} needed, "
                f"{format_quantity(self.available)} free")


def shortfalls(demand: Vector, available: Vector | None) -> list[Shortfall]:
    """What `demand` lacks within `available` (None means unlimited); empty when it fits."""
    if available is None:
        return []
    missing = []
    for name, needed in sorted(demand.items()):
        if needed <= 0:
            continue
        if name == PODS and PODS not in available:
            continue
        have = available.get(name, Fraction(0))
        if needed > have:
            missing.append(Shortfall(name, needed, have))
    return missing


def fits(demand: Vector, available: Vector | None) -> bool:
    return not shortfalls(demand, available)


def format_vector(vector: Vector) -> str:
    """`cpu=4,memory=8Gi,pods=2`: stable, exact, and parseable by `parse_vector_text`."""
    return ",".join(f"{name}={format_quantity(amount)}"
                    for name, amount in sorted(vector.items()) if amount)


def parse_vector_text(text: str) -> dict[str, Fraction]:
    """Inverse of `format_vector`."""
    vector: dict[str, Fraction] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, amount = item.partition("=")
        vector[name.strip()] = parse_quantity(amount.strip())
    return vector
