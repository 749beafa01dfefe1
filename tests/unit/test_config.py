"""The configuration's defaults are pinned: changing one is a decision, not an accident."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dispatcher.config import DispatcherConfig, reference_markdown


def test_defaults() -> None:
    config = DispatcherConfig()
    assert config.model_dump(mode="json", by_alias=True) == {
        "namespace": "trainjob-dispatcher",
        "managerKubeconfig": None,
        "reconcileWorkers": 16,
        "claim": {"managedBy": "kueue.x-k8s.io/multikueue", "namespaces": [],
                  "labelSelector": ""},
        "client": {"qps": 200.0, "burst": 400, "timeoutSeconds": 15.0},
        "workers": {"fromCRD": True, "static": [], "probeIntervalSeconds": 10.0,
                    "lostTimeoutSeconds": 900.0, "whenLost": "Requeue", "createNamespaces": True,
                    "allowInsecureKubeconfigs": False},
        "placement": {"policy": "MostFree", "queueingStrategy": "BestEffortFIFO",
                      "demandMode": "Sum", "rejectionBackoffSeconds": 300.0,
                      "admissionTimeoutSeconds": 300.0,
                      "preemption": {"policy": "Never"}},
        "mirror": {"origin": "trainjob-dispatcher", "keepFinished": False,
                   "retainFinishedSeconds": 3600.0, "maxEvictions": 5,
                   "requeueBackoffSeconds": 5.0},
        "admissionCheck": {"controllerName": "", "readyWhen": "MirrorCreated"},
        "gc": {"intervalSeconds": 60.0},
        "server": {"host": "0.0.0.0", "port": 8080, "statusPage": True,
                   "statusHost": "127.0.0.1", "statusPort": 8081, "logs": True,
                   "logsHost": "127.0.0.1", "logsPort": 8082},
        "leaderElection": {"enabled": False, "leaseName": "trainjob-dispatcher",
                           "leaseDurationSeconds": 15, "renewDeadlineSeconds": 10,
                           "retryPeriodSeconds": 2},
        "jsonLogs": False,
    }


def test_unknown_keys_and_bad_values_are_refused() -> None:
    with pytest.raises(ValidationError):
        DispatcherConfig.model_validate({"workers": {"lostTimout": 3}})
    with pytest.raises(ValidationError):
        DispatcherConfig.model_validate({"client": {"qps": 0}})


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPATCHER_CLIENT__QPS", "500")
    assert DispatcherConfig().client.qps == 500


def test_the_configuration_reference_page_carries_the_table() -> None:
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "reference" / "configuration.md"
    assert reference_markdown() in page.read_text(), (
        "regenerate with `python -m devkit.reference_docs docs/reference`")
