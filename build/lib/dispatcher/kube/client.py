"""One API client per cluster, with a rate limit and a timeout on every request.

`ClusterClient` wraps a `kubernetes_asyncio` `ApiClient` built from an in-memory
kubeconfig. Every request goes through `request()`, which waits for the cluster's
token bucket (QPS and burst, per cluster, so a slow worker never starves the others),
applies a total timeout (the library's default is none: a half-open connection would
hang forever), and records the request count and latency by verb and code.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiolimiter import AsyncLimiter
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import load_incluster_config, new_client_from_config_dict

from dispatcher.clock import Clock, SystemClock

JSON = dict[str, Any]
RequestObserver = Callable[[str, str, int, float], None]
"""Called with (cluster, verb, HTTP status or 0 for no answer, seconds) after each request."""


@dataclass(frozen=True)
class ClientSettings:
    """Per-cluster client limits (see `config.ClientConfig` for their meaning)."""

    qps: float = 200.0
    burst: int = 400
    timeout_seconds: float = 15.0
    pool_size: int = 64


def api_error(code: int, reason: str | None, body: bytes) -> ApiException:
    """An ApiException carrying the server's Status body, like the library raises."""
    error = ApiException(status=code, reason=reason)
    error.body = body.decode(errors="replace")  # type: ignore[assignment]
    return error


def _resolve_environment_once(api: ApiClient) -> None:
    """Look up the proxy from the environment once, not on every request.

    The library's HTTP session trusts the environment, so aiohttp reads `~/.netrc` and the
    proxy variables in a thread on every request: a large share of this process's CPU
    time when dispatching. The proxy (`HTTPS_PROXY`/`NO_PROXY`, as client-go honours them)
    is resolved here once per client, unless the kubeconfig names one; the session is
    replaced by one that does not consult the environment again. Credentials always come
    from the kubeconfig, never from `.netrc`.
    """
    rest = api.rest_client
    if not rest.proxy:
        url = urllib.parse.urlsplit(str(api.configuration.host))
        proxy = urllib.request.getproxies().get(url.scheme)
        if proxy and url.hostname and not urllib.request.proxy_bypass(url.hostname):
            rest.proxy = proxy
    session = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(
        connector=session.connector, trust_env=False, read_bufsize=2**21)
    session.detach()


def _no_observer(cluster: str, verb: str, code: int, seconds: float) -> None:
    return None


class ClusterClient:
    """A rate-limited, time-bounded HTTP client for one cluster's API server."""

    def __init__(
        self,
        *,
        name: str,
        api: ApiClient,
        settings: ClientSettings,
        observer: RequestObserver = _no_observer,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.api = api
        self._clock: Clock = clock or SystemClock()
        self.settings = settings
        _resolve_environment_once(api)
        self._limiter = AsyncLimiter(
            max_rate=settings.burst, time_period=settings.burst / settings.qps
        )
        self._observer = observer

    @classmethod
    async def from_kubeconfig(
        cls,
        *,
        name: str,
        kubeconfig: JSON,
        settings: ClientSettings,
        observer: RequestObserver = _no_observer,
        clock: Clock | None = None,
    ) -> ClusterClient:
        api = await new_client_from_config_dict(config_dict=kubeconfig)
        api.configuration.connection_pool_maxsize = settings.pool_size
        return cls(name=name, api=api, settings=settings, observer=observer, clock=clock)

    @classmethod
    async def in_cluster(
        cls, *, name: str, settings: ClientSettings, observer: RequestObserver = _no_observer,
        clock: Clock | None = None,
    ) -> ClusterClient:
        """The client of the cluster this process runs in (service-account token)."""
        configuration = Configuration()
        load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        configuration.connection_pool_maxsize = settings.pool_size
        return cls(name=name, api=ApiClient(configuration), settings=settings, observer=observer,
                   clock=clock)

    def as_bearer(self, token: str, *, name: str) -> ClusterClient:
        """A client of the same API server (its address and CA) that authenticates with
        `token` alone, none of this client's own credentials: to ask the server what the
        token's holder may do. Close it after use."""
        own = self.api.configuration
        configuration = Configuration(host=own.host, api_key={"BearerToken": token},
                                      api_key_prefix={"BearerToken": "Bearer"})
        configuration.ssl_ca_cert = own.ssl_ca_cert
        configuration.verify_ssl = own.verify_ssl
        configuration.proxy = own.proxy
        return ClusterClient(name=name, api=ApiClient(configuration), settings=self.settings,
                             observer=self._observer, clock=self._clock)

    async def close(self) -> None:
        await self.api.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
        verb: str | None = None,
    ) -> JSON:
        """Send one request and return the decoded JSON body; raise ApiException on error."""
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        await self._limiter.acquire()
        started = self._clock.monotonic()
        code = 0
        try:
            response = await self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(
                    total=timeout or self.settings.timeout_seconds
                ),
            )
            code = response.status
            data = await response.read()
        finally:
            self._observer(self.name, verb or method.lower(), code,
                           self._clock.monotonic() - started)
        if not 200 <= code <= 299:
            raise api_error(code, response.reason, data)
        return json.loads(data) if data else {}

    async def stream(
        self,
        path: str,
        *,
        query: list[tuple[str, Any]],
        timeout: aiohttp.ClientTimeout,
        accept: str = "application/json",
        verb: str = "watch",
    ) -> aiohttp.ClientResponse:
        """Open a streaming GET (a watch, a log); the caller reads lines and closes it."""
        await self._limiter.acquire()
        started = self._clock.monotonic()
        code = 0
        try:
            response = await self.api.call_api(
                path,
                "GET",
                query_params=query,
                header_params={"Accept": accept},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
            code = response.status
        finally:
            self._observer(self.name, verb, code, self._clock.monotonic() - started)
        if not 200 <= code <= 299:
            data = await response.read()
            response.release()
            raise api_error(code, response.reason, data)
        return response  # type: ignore[no-any-return]
