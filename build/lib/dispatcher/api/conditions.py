"""Reading `metav1.Condition` lists, the same way for every object that has them."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def condition(obj_or_status: JSON | None, type_: str) -> JSON | None:
    """A copy of the condition of `type_` in `obj_or_status["conditions"]`, or None."""
    for cond in (obj_or_status or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def condition_true(status: JSON | None, type_: str) -> bool:
    cond = condition(status, type_)
    return cond is not None and cond.get("status") == "True"
