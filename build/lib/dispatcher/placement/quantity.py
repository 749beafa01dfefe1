"""Exact Kubernetes quantity arithmetic ("500m", "4Gi", "1.5", "2e3", "100Ki").

Quantities parse to `fractions.Fraction`, so sums and differences are exact: no float
ever rounds a CPU or memory amount. `format_quantity` prints a value back in the most
natural Kubernetes form.

Parsing is bounded so that no text can make it slow or huge: at most 64 characters and
an exponent of at most 64 either way (Kubernetes itself keeps quantities within int64
base units; `placement.validation` decides what size is sane).
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+\.?\d*|\.\d+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<decimal>[numkMGTPE]?))$"
)


MAX_TEXT_LENGTH = 64
MAX_EXPONENT = 64


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity exactly; ints are taken as is, floats through their decimal text."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    text = repr(value) if isinstance(value, float) else str(value).strip()
    if len(text) > MAX_TEXT_LENGTH:
        raise QuantityError(f"not a quantity: {text[:MAX_TEXT_LENGTH]!r}... "
                            f"(longer than {MAX_TEXT_LENGTH} characters)")
    return _parse_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    """A fleet spells its quantities a few ways ("1", "500m", "4Gi") over and over: the
    (immutable) results are cached."""
    match = _PATTERN.match(text)
    if not match:
        raise QuantityError(f"not a quantity: {text!r}")
    number = Fraction(match["number"])
    if match["sign"] == "-":
        number = -number
    if match["binary"]:
        return number * _BINARY[match["binary"]]
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(f"not a quantity: {text!r} (exponent beyond {MAX_EXPONENT})")
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[match["decimal"] or ""]


def format_quantity(value: Fraction) -> str:
    """The shortest exact Kubernetes spelling: "4Gi", "500m", "1500Mi", "3"."""
    if value == 0:
        return "0"
    if value.denominator == 1:
        whole = value.numerator
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            factor = _BINARY[suffix]
            if abs(whole) >= factor and whole % factor == 0:
                return f"{whole // factor}{suffix}"
        return str(whole)
    for suffix, factor in (("m", 1000), ("u", 10**6), ("n", 10**9)):
        scaled = value * factor
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    nano = value * 10**9
    rounded_up = -(-nano.numerator // nano.denominator)
    return f"{rounded_up}n"
