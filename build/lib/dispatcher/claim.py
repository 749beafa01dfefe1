"""Which manager jobs this dispatcher claims: one rule, for every reader.

A job is claimed when its `spec.managedBy` is `claim.managedBy`, its namespace is one of
`claim.namespaces` (any, when the list is empty) and its labels match
`claim.labelSelector`. The job controller, the status page, `dispatcher jobs` and the
metrics all ask this one `Claim`, so none of them shows or counts a job the others
ignore. `refusal` says in words why a job is not claimed, for people.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.config import ClaimConfig
from dispatcher.placement.selector import parse_selector


class Claim:
    def __init__(self, config: ClaimConfig) -> None:
        self._managed_by = config.managed_by
        self._namespaces = frozenset(config.namespaces)
        self._selector_text = config.label_selector
        self._selector = parse_selector(config.label_selector)

    def claims(self, job: Mapping[str, Any]) -> bool:
        return not self.refusal(job)

    def missing_managed_by(self, job: Mapping[str, Any]) -> str:
        """The `spec.managedBy` the job must carry to be claimed, when that is what it
        lacks; empty otherwise."""
        managed_by = (job.get("spec") or {}).get("managedBy")
        return "" if managed_by == self._managed_by else self._managed_by

    def refusal(self, job: Mapping[str, Any]) -> str:
        """Why the job is not claimed; empty when it is."""
        if self.missing_managed_by(job):
            return f"spec.managedBy is not {self._managed_by}"
        metadata = job["metadata"]
        if self._namespaces and metadata.get("namespace") not in self._namespaces:
            return f"namespace {metadata.get('namespace')} is not in claim.namespaces"
        if not self._selector(metadata.get("labels") or {}):
            return f"its labels do not match claim.labelSelector {self._selector_text!r}"
        return ""
