"""The choices placement offers; the configuration selects among them."""

from __future__ import annotations

from enum import StrEnum


class QueueingStrategy(StrEnum):
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    """A job that fits nowhere does not hold back smaller jobs behind it."""
    STRICT_FIFO = "StrictFIFO"
    """Jobs are placed strictly in queue order: the first that waits blocks the rest."""


class PlacementPolicy(StrEnum):
    MOST_FREE = "MostFree"
    """Spread: the worker with the largest free share of its quota."""
    BEST_FIT = "BestFit"
    """Pack: the worker with the smallest free share left after placing the job."""


class DemandMode(StrEnum):
    SUM = "Sum"
    """All replicated jobs at once, initializers included (what Kueue counts)."""
    PEAK_OF_STEPS = "PeakOfSteps"
    """The largest step of a runtime whose replicated jobs run one after another."""


class PreemptionPolicy(StrEnum):
    NEVER = "Never"
    """A job that fits nowhere waits until room is freed (as Kueue's default)."""
    LOWER_PRIORITY = "LowerPriority"
    """A job that fits nowhere takes room from jobs of strictly lower priority on the
    one worker where that costs least (`placement/preemption.py`)."""
