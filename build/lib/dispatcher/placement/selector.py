"""Kubernetes label selectors in their string form, parsed into a predicate.

Supports `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` and `!k`, joined by
commas. An empty selector matches everything.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping

Predicate = Callable[[Mapping[str, str]], bool]

_SET = re.compile(r"^\s*(?P<key>[^\s!=,()]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*$")
_EQ = re.compile(r"^\s*(?P<key>[^\s!=,()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=,()]*)\s*$")
_EXISTS = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[^\s!=,()]+)\s*$")


class SelectorError(ValueError):
    """A selector string that cannot be parsed."""


def _split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Predicate:
    if match := _SET.match(text):
        key, values = match["key"], {v.strip() for v in match["values"].split(",")}
        if match["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQ.match(text):
        key, value = match["key"], match["value"]
        if match["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS.match(text):
        key, negated = match["key"], bool(match["neg"])
        return lambda labels: (key in labels) != negated
    raise SelectorError(f"cannot parse label selector requirement {text.strip()!r}")


@functools.lru_cache(maxsize=1024)
def parse_selector(text: str) -> Predicate:
    """The predicate of `text`; the same text gives the same (cached) function."""
    requirements = [_requirement(part) for part in _split(text or "")]
    return lambda labels: all(r(labels) for r in requirements)
