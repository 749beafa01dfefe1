"""The peer benchmark's report: each of our settings present gets its headline against
the best MultiKueue setting of the same run."""

from __future__ import annotations

import copy
import json
from typing import Any

from bench.harness import RESULTS
from bench.peer.report import markdown


def a_run_with_the_symmetric_setting() -> dict[str, Any]:
    run: dict[str, Any] = json.loads((RESULTS / "peer-multikueue-200-2w.json").read_text())
    check = copy.deepcopy(run["systems"]["dispatcher-fair"])
    check["burst"]["jobs_per_second"] = 2 * run["systems"]["multikueue-tuned-remote-qps"][
        "burst"]["jobs_per_second"]
    run["systems"]["dispatcher-check"] = check
    return run


def test_the_fair_and_the_symmetric_setting_each_have_a_headline_against_the_best_peer() -> None:
    text = markdown(a_run_with_the_symmetric_setting())
    headlines = [line for line in text.splitlines() if line.startswith("Headline")]
    assert len(headlines) == 2, headlines
    assert headlines[0].startswith("Headline, fair mode")
    assert headlines[1].startswith("Headline, symmetric setting")
    assert all("`multikueue-tuned-remote-qps`" in line for line in headlines)
    after = text.split(headlines[1], 1)[1].splitlines()
    assert after[1] == "- throughput: 2.0x (target: at least 10x)"


def test_a_run_without_multikueue_has_no_headline() -> None:
    run = a_run_with_the_symmetric_setting()
    run["systems"] = {n: s for n, s in run["systems"].items()
                      if s["settings"]["kind"] == "dispatcher"}
    assert "Headline" not in markdown(run)
