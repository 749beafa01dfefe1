"""Validating kubeconfigs before a client is built from them.

A worker's kubeconfig comes from a Secret anyone with write access to the dispatcher's
namespace can edit, so it is checked first: it must parse, name a current context whose
cluster and user exist, and carry its credentials inline. Exec and auth-provider plugins
(they run programs) and file references (they read the dispatcher's own files) are
refused unless the admin allows them. Error messages never quote credentials.
"""

from __future__ import annotations

from typing import Any

import yaml

JSON = dict[str, Any]

_FILE_FIELDS = {
    "cluster": ("certificate-authority",),
    "user": ("client-certificate", "client-key", "tokenFile", "token-file"),
}


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used; `insecure` tells a policy refusal from a mistake."""

    def __init__(self, message: str, *, insecure: bool = False) -> None:
        super().__init__(message)
        self.insecure = insecure


def _named(entries: Any, name: str, kind: str) -> JSON:
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(kind)
            if isinstance(body, dict):
                return body
    raise KubeconfigError(f"{kind} {name!r} named by the current context is not defined")


def parse_kubeconfig(text: str | bytes, *, allow_insecure: bool = False) -> JSON:
    """Parse and check a kubeconfig; returns it as a dict ready for a client."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise KubeconfigError(f"kubeconfig is not valid YAML{where}") from None
    if not isinstance(config, dict):
        raise KubeconfigError("kubeconfig is not a YAML mapping")
    current = config.get("current-context")
    contexts = config.get("contexts") or []
    if not current:
        if len(contexts) != 1:
            raise KubeconfigError("kubeconfig has no current-context")
        current = contexts[0].get("name")
        config["current-context"] = current
    context = _named(contexts, current, "context")
    cluster = _named(config.get("clusters"), context.get("cluster", ""), "cluster")
    user = _named(config.get("users"), context.get("user", ""), "user")
    if not str(cluster.get("server", "")).startswith(("https://", "http://")):
        raise KubeconfigError("cluster has no server URL")
    if allow_insecure:
        return config
    for kind, body in (("cluster", cluster), ("user", user)):
        for field in _FILE_FIELDS[kind]:
            if field in body:
                raise KubeconfigError(
                    f"{kind} uses a file reference ({field}); inline the data "
                    f"({field}-data) or allow insecure kubeconfigs", insecure=True)
    for plugin in ("exec", "auth-provider"):
        if plugin in user:
            raise KubeconfigError(
                f"user uses an {plugin} plugin, which runs code; use a token or client "
                "certificate, or allow insecure kubeconfigs", insecure=True)
    if not any(k in user for k in ("token", "client-certificate-data", "username")):
        raise KubeconfigError("user has no credentials (token or client certificate)")
    return config
