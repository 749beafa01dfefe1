"""`only_version`: a CRD cut down to one served version, as Kueue 0.20 and later ship theirs."""

from __future__ import annotations

from typing import Any

import pytest

from devkit.localcluster.binaries import only_version


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "workloads.kueue.x-k8s.io"},
        "spec": {
            "group": "kueue.x-k8s.io", "scope": "Namespaced",
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"]}},
            "versions": [
                {"name": "v1beta1", "served": True, "storage": False, "schema": {"a": 1}},
                {"name": "v1beta2", "served": True, "storage": True, "schema": {"b": 2}},
            ],
        },
    }


def test_keeps_the_one_version_served_and_stored_without_conversion() -> None:
    original = crd()
    stripped = only_version(original, "v1beta2")
    assert stripped["spec"]["versions"] == [
        {"name": "v1beta2", "served": True, "storage": True, "schema": {"b": 2}}]
    assert "conversion" not in stripped["spec"]
    assert stripped["spec"]["group"] == "kueue.x-k8s.io"
    assert original == crd(), "the original is not changed"


def test_an_older_version_becomes_the_storage_version() -> None:
    stripped = only_version(crd(), "v1beta1")
    assert stripped["spec"]["versions"] == [
        {"name": "v1beta1", "served": True, "storage": True, "schema": {"a": 1}}]


def test_a_version_the_crd_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="no version v1"):
        only_version(crd(), "v1")
