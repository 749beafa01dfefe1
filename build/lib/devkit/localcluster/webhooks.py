"""Pointing a controller's webhook configurations at its local webhook server.

A Go module ships its `MutatingWebhookConfiguration` and `ValidatingWebhookConfiguration`
with each webhook calling an in-cluster Service. Here the controller serves on
127.0.0.1, so `pointed_at` gives each configuration a `url` and the CA bundle of the
cluster (whose CA signed the server's certificate), under a name of our own, keeping
only the webhooks `keep` accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dispatcher.kube.resource import ResourceKind

JSON = dict[str, Any]
MUTATING = ResourceKind("admissionregistration.k8s.io", "v1",
                        "mutatingwebhookconfigurations", namespaced=False)
VALIDATING = ResourceKind("admissionregistration.k8s.io", "v1",
                          "validatingwebhookconfigurations", namespaced=False)


def _every(webhook: JSON) -> bool:
    return True


def pointed_at(manifests: list[JSON], *, prefix: str, base_url: str, ca_bundle: str,
               keep: Callable[[JSON], bool] = _every) -> list[tuple[ResourceKind, JSON]]:
    """The configurations in `manifests`, named `prefix-<name>`, calling `base_url`."""
    result = []
    for manifest in manifests:
        kind = MUTATING if manifest["kind"] == "MutatingWebhookConfiguration" else VALIDATING
        webhooks = [{**webhook, "clientConfig": {
            "url": f"{base_url}{webhook['clientConfig']['service']['path']}",
            "caBundle": ca_bundle}}
            for webhook in manifest.get("webhooks") or [] if keep(webhook)]
        result.append((kind, {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": manifest["kind"],
            "metadata": {"name": f"{prefix}-{manifest['metadata']['name']}"},
            "webhooks": webhooks,
        }))
    return result
