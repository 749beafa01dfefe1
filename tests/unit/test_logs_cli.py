"""`dispatcher logs`'s options, as the logs endpoint gets them."""

from __future__ import annotations

import pytest

from dispatcher import logs_cli
from dispatcher.cli import build_parser


def test_the_options_are_kubectl_logs_options() -> None:
    args = build_parser().parse_args(["logs", "ns/job", "-f", "--node-rank", "2", "--tail",
                                      "5", "--since", "5m", "-c", "node"])
    assert logs_cli.query_of(args) == {"container": "node", "nodeRank": "2", "tailLines": "5",
                                       "sinceSeconds": "300", "follow": "true"}


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("2h", 7200)])
def test_since_reads_a_duration(text: str, seconds: int) -> None:
    assert logs_cli.seconds_of(text) == seconds


@pytest.mark.parametrize("text", ["five minutes", "5", "-5m", "1.5h"])
def test_since_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(logs_cli.LogsError):
        logs_cli.seconds_of(text)
