"""The per-cluster client reads the proxy environment once, at creation."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from dispatcher.kube.client import ClientSettings, ClusterClient


@pytest.fixture
def proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "direct.example")


async def client_for(host: str, *, proxy: str | None = None) -> ClusterClient:
    configuration = Configuration(host=host)
    configuration.proxy = proxy
    return ClusterClient(name="c", api=ApiClient(configuration), settings=ClientSettings())


@pytest.mark.usefixtures("proxy_environment")
@pytest.mark.parametrize(("host", "kubeconfig_proxy", "expected"), [
    ("https://api.example:6443", None, "http://proxy.example:3128"),
    ("https://direct.example:6443", None, None),
    ("https://api.example:6443", "http://from-kubeconfig:8080", "http://from-kubeconfig:8080"),
])
async def test_proxy_resolved_once_from_environment_or_kubeconfig(
    host: str, kubeconfig_proxy: str | None, expected: str | None
) -> None:
    client = await client_for(host, proxy=kubeconfig_proxy)
    try:
        rest = client.api.rest_client
        assert rest.proxy == expected
        assert rest.pool_manager.trust_env is False
        assert not rest.pool_manager.closed
    finally:
        await client.close()
    assert client.api.rest_client.pool_manager.closed
