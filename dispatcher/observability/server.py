"""The HTTP endpoints Kubernetes and Prometheus use: /metrics, /healthz, /readyz.

`/healthz` answers 200 while the event loop runs. `/readyz` answers 200 once the caches
are synced and the ledger rebuilt; its body says `leader` or `standby`. Given a status
provider, the same server also serves the read-only status page (`statuspage.py`) at `/`.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dispatcher.clock import Clock
from dispatcher.observability.statuspage import StatusPage, StatusProvider


class HealthServer:
    def __init__(self, *, registry: CollectorRegistry, host: str, port: int,
                 ready: Callable[[], bool], role: Callable[[], str], clock: Clock,
                 status: StatusProvider | None = None) -> None:
        self._registry = registry
        self._host = host
        self._port = port
        self._ready = ready
        self._role = role
        self._status = status
        self._clock = clock
        self._runner: web.AppRunner | None = None
        self.port = port

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        role = self._role()
        if role == "standby":
            return web.Response(text="standby")
        return web.Response(text=role if self._ready() else "starting",
                            status=200 if self._ready() else 503)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self._status is not None:
            StatusPage(provider=self._status, role=self._role,
                       clock=self._clock).add_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
