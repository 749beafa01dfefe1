"""Label selectors and kubeconfig validation."""

from __future__ import annotations

import pytest
import yaml

from dispatcher.kube.kubeconfig import KubeconfigError, parse_kubeconfig
from dispatcher.placement.selector import SelectorError, parse_selector


@pytest.mark.parametrize(("selector", "labels", "matches"), [
    ("", {}, True),
    ("a=b", {"a": "b"}, True), ("a==b", {"a": "c"}, False), ("a!=b", {}, True),
    ("a in (x, y)", {"a": "y"}, True), ("a notin (x,y)", {"a": "x"}, False),
    ("a", {"a": ""}, True), ("!a", {"a": "1"}, False),
    ("gpu=h100,zone in (eu,us)", {"gpu": "h100", "zone": "us"}, True),
    ("gpu=h100,zone in (eu,us)", {"gpu": "h100", "zone": "ap"}, False),
])
def test_selectors(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(selector)(labels) is matches


def test_bad_selector() -> None:
    with pytest.raises(SelectorError):
        parse_selector("a in b")


def kubeconfig(user: dict[str, object], cluster: dict[str, object] | None = None) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443",
                                                         "certificate-authority-data": "Zm9v"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    })


def test_inline_credentials_are_accepted() -> None:
    config = parse_kubeconfig(kubeconfig({"token": "secret-token"}))
    assert config["current-context"] == "ctx"


@pytest.mark.parametrize("user", [
    {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}},
    {"auth-provider": {"name": "gcp"}},
    {"tokenFile": "/var/run/token"},
    {"client-certificate": "/etc/cert.pem", "client-key": "/etc/key.pem"},
])
def test_plugins_and_file_references_are_refused_unless_allowed(user: dict[str, object]) -> None:
    with pytest.raises(KubeconfigError) as refused:
        parse_kubeconfig(kubeconfig(user))
    assert refused.value.insecure
    assert parse_kubeconfig(kubeconfig(user), allow_insecure=True)


def test_errors_never_quote_credentials() -> None:
    text = kubeconfig({"token": "super-secret"}).replace("current-context: ctx",
                                                         "current-context: nope")
    with pytest.raises(KubeconfigError) as error:
        parse_kubeconfig(text)
    assert "super-secret" not in str(error.value)
    with pytest.raises(KubeconfigError, match="not valid YAML"):
        parse_kubeconfig("token: super-secret\n  bad: [")
    with pytest.raises(KubeconfigError, match="no credentials"):
        parse_kubeconfig(kubeconfig({}))
    with pytest.raises(KubeconfigError, match="file reference"):
        parse_kubeconfig(kubeconfig({"token": "t"}, {"server": "https://x",
                                                     "certificate-authority": "/ca"}))
