"""The peer benchmark's behaviour scenarios by name, and the loop that runs them.

`run_scenarios(systems, scenarios=[...])` runs every scenario for every system in turn
(bench/peer/scenarios.py, bench/peer/preemption.py), each on fresh clusters, and returns
scenario -> system -> result. A system named in `only_in` runs only in the scenario
given there; a system that cannot preempt (`System.preempts`) is left out of
`preemption`, with a line saying so, since its urgent job could only wait. A scenario
no system ran is left out of the results.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from bench.peer.env import System
from bench.peer.preemption import preemption
from bench.peer.scenarios import ScenarioSizes, complete, frozen, oversubscribed, steady

Scenario = Callable[..., Awaitable[dict[str, Any]]]
SCENARIO_RUNS: dict[str, Scenario] = {
    "frozen": frozen, "oversubscribed": oversubscribed, "steady": steady,
    "complete": complete, "preemption": preemption}
SCENARIOS = tuple(SCENARIO_RUNS)


async def run_scenarios(systems: dict[str, System], *, workers: int, scenarios: list[str],
                        sizes: ScenarioSizes, only_in: dict[str, str] | None = None
                        ) -> dict[str, dict[str, Any]]:
    """scenario -> system -> result; systems alternate within each scenario."""
    results: dict[str, dict[str, Any]] = {}
    for scenario in scenarios:
        results[scenario] = {}
        for name, system in systems.items():
            if (only_in or {}).get(name, scenario) != scenario:
                continue
            if scenario == "preemption" and not system.preempts:
                print(f"peer scenario {scenario}: {name} left out: it does not preempt",
                      flush=True)
                continue
            print(f"peer scenario {scenario}: {name} ...", flush=True)
            result = await SCENARIO_RUNS[scenario](system, workers=workers, sizes=sizes)
            results[scenario][name] = result
            print({k: v for k, v in result.items() if k not in ("timeline", "latencies")},
                  flush=True)
        if not results[scenario]:
            del results[scenario]
    return results
