"""The read-only status page: `GET /` (HTML), `/static/...` (CSS, script), `/api/status`.

The page is plain HTML, CSS and a small script shipped in the package (no build step);
the script polls `/api/status?offset=&limit=` every two seconds and draws what
`statusview.build_view` made, with a link to each placed or finished job's logs on the
logs endpoint (`logs_endpoint.py`, which asks for the reader's manager token). Nothing
here writes: every route is a GET. It shows job
names and namespaces, so it is served on an address of its own, loopback by default
(`server.statusHost`/`server.statusPort`, see `server.py`), and `server.statusPage:
false` turns it off. The cache's age and the view's time are read
from the injected `Clock`.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from dispatcher.clock import Clock
from dispatcher.observability.statusview import StatusView

STATIC = Path(__file__).resolve().parent / "static"
_FILES = {"status.css": "text/css", "status.js": "text/javascript"}
_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
CACHE_SECONDS = 1.0
"""A view is reused this long: building one walks every job (about 0.2 s at 10,000 jobs in
the benchmark), and several open pages poll every 2 s."""

StatusProvider = Callable[[int, int], Callable[[], StatusView]]
"""(offset, limit) -> a build of the view of now: the provider takes its inputs from the
caches at once, on the event loop; the build reads only those and runs in a thread, so
the event loop is not held while it walks every job."""


def _int(request: web.Request, name: str, default: int, *, low: int, high: int) -> int:
    try:
        value = int(request.query.get(name, default))
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer") from None
    return max(low, min(value, high))


class StatusPage:
    """Routes of the page on an aiohttp application."""

    def __init__(self, *, provider: StatusProvider, role: Callable[[], str],
                 clock: Clock, logs_port: int | None = None) -> None:
        self._provider = provider
        self._role = role
        self._clock = clock
        self._logs_port = logs_port
        """Where the logs endpoint listens, for the page's links (None: not served)."""
        self._cache: dict[tuple[int, int], tuple[float, str]] = {}

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._index)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/status", self._status)

    async def _index(self, request: web.Request) -> web.Response:
        return web.Response(body=(STATIC / "index.html").read_bytes(),
                            content_type="text/html", charset="utf-8", headers=_HEADERS)

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _FILES:
            raise web.HTTPNotFound()
        return web.Response(body=(STATIC / name).read_bytes(), content_type=_FILES[name],
                            charset="utf-8", headers=_HEADERS)

    async def _status(self, request: web.Request) -> web.Response:
        offset = _int(request, "offset", 0, low=0, high=10**9)
        limit = _int(request, "limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
        return web.Response(text=await self._body(offset, limit),
                            content_type="application/json", headers=_HEADERS)

    async def _body(self, offset: int, limit: int) -> str:
        now = self._clock.monotonic()
        cached = self._cache.get((offset, limit))
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        generated_at = datetime.datetime.fromtimestamp(self._clock.time(), datetime.UTC)
        text = await asyncio.to_thread(_render, self._provider(offset, limit), self._role(),
                                       generated_at, self._logs_port)
        self._cache = {k: v for k, v in self._cache.items() if now - v[0] < CACHE_SECONDS}
        self._cache[(offset, limit)] = (now, text)
        return text


def _render(build: Callable[[], StatusView], role: str, generated_at: datetime.datetime,
            logs_port: int | None) -> str:
    body = build().to_json()
    body["role"] = role
    body["logsPort"] = logs_port
    body["generatedAt"] = generated_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps(body, separators=(",", ":"))
