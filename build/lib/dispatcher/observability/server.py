"""The HTTP endpoints: /metrics, /healthz and /readyz on one address, the status page on
another (and the logs endpoint, `logs_endpoint.py`, on a third).

`/healthz` answers 200 while the event loop runs. `/readyz` answers 200 once the caches
are synced and the ledger rebuilt; its body says `leader` or `standby`. They and
`/metrics` are served where the kubelet and Prometheus reach them (`server.host`,
`server.port`). The read-only status page (`statuspage.py`) lists every namespace's job
names, so it has an address of its own (`server.statusHost`, `server.statusPort`),
loopback unless an admin opens it on purpose.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dispatcher.clock import Clock
from dispatcher.observability.statuspage import StatusPage, StatusProvider

_SHUTDOWN_SECONDS = 2.0


class Site:
    """One aiohttp application served on one address until `stop`."""

    def __init__(self, app: web.Application, *, host: str, port: int) -> None:
        self._app = app
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self.bound: tuple[str, int] | None = None
        """The address the socket is bound to, once started."""

    async def start(self) -> None:
        # A handler ends when its caller goes (a followed log would wait for lines
        # forever), and stopping waits a moment, not a minute, for the open ones.
        self._runner = web.AppRunner(self._app, access_log=None, handler_cancellation=True,
                                     shutdown_timeout=_SHUTDOWN_SECONDS)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        host, port = self._runner.addresses[0][:2]
        self.bound = (str(host), int(port))
        self.port = int(port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def health_site(*, registry: CollectorRegistry, host: str, port: int,
                ready: Callable[[], bool], role: Callable[[], str]) -> Site:
    """/metrics, /healthz and /readyz."""
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        current = role()
        if current == "standby":
            return web.Response(text="standby")
        return web.Response(text=current if ready() else "starting",
                            status=200 if ready() else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return Site(app, host=host, port=port)


def status_site(*, provider: StatusProvider, role: Callable[[], str], clock: Clock,
                host: str, port: int, logs_port: int | None = None) -> Site:
    """The status page on an address of its own."""
    app = web.Application()
    StatusPage(provider=provider, role=role, clock=clock, logs_port=logs_port).add_routes(app)
    return Site(app, host=host, port=port)
