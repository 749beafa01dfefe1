"""`GET /logs/NAMESPACE/NAME`: a job's pod logs, for callers who may read the job.

The caller sends its own manager token (`Authorization: Bearer ...`, what `dispatcher
logs` sends from the caller's kubeconfig). The manager's API server is asked, with that
token alone, whether its holder may `get` that TrainJob (a SelfSubjectAccessReview,
`kube/access_review.py`): 401 when the server does not accept the token, 403 when the
holder may not. Only then are the logs read, through the dispatcher's own credentials
for the worker (`controllers/logs.py`), so callers need none. Query parameters, as
`kubectl logs` names them: `container`, `replicatedJob`, `nodeRank`, `follow`,
`tailLines`, `sinceSeconds`, `timestamps`. The body is the log as text, streamed; a
standby replica (no worker connections) answers 503.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from aiohttp import web

from dispatcher.api.trainer import GROUP, TRAINJOBS
from dispatcher.controllers.logs import JobLogs, LogQuery, LogsUnavailable
from dispatcher.kube.access_review import NotAuthenticated, may
from dispatcher.kube.client import ClusterClient
from dispatcher.kube.pod_logs import LogOptions
from dispatcher.kube.resource import message_of
from dispatcher.observability.server import Site

log = logging.getLogger(__name__)
PATH = "/logs/{namespace}/{name}"
_TEXT = "text/plain; charset=utf-8"


class LogsEndpoint:
    def __init__(self, *, manager: ClusterClient, logs: Callable[[], JobLogs | None]) -> None:
        self._manager = manager
        self._logs = logs
        """The current leadership term's JobLogs; None while this replica stands by."""

    def site(self, *, host: str, port: int) -> Site:
        app = web.Application()
        app.router.add_get(PATH, self.handle)
        return Site(app, host=host, port=port)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        try:
            query = _query(namespace, name, request)
            logs = self._logs()
            if logs is None:
                raise LogsUnavailable(503, "this replica stands by; the leader serves logs")
            await self._authorize(request, namespace, name)
            located = await logs.locate(query)
        except LogsUnavailable as refusal:
            return web.Response(status=refusal.status, text=f"{refusal}\n",
                                content_type="text/plain")
        except Exception as error:  # a worker that does not answer, say
            log.warning("logs of %s/%s: %s", namespace, name, error)
            return web.Response(status=502, text=f"{message_of(error)}\n",
                                content_type="text/plain")
        response = web.StreamResponse(headers={
            "Content-Type": _TEXT, "Cache-Control": "no-store",
            "X-Worker": located.worker.name, "X-Content-Type-Options": "nosniff"})
        await response.prepare(request)
        async with contextlib.aclosing(logs.lines(query, located)) as lines:
            async for line in lines:
                await response.write(f"{line}\n".encode())
        await response.write_eof()
        return response

    async def _authorize(self, request: web.Request, namespace: str, name: str) -> None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise LogsUnavailable(401, "send your manager token: Authorization: Bearer TOKEN")
        caller = self._manager.as_bearer(token.strip(), name="logs-caller")
        try:
            allowed = await may(caller, verb="get", group=GROUP, resource=TRAINJOBS.plural,
                                namespace=namespace, name=name)
        except NotAuthenticated as error:
            raise LogsUnavailable(401, "the manager did not accept the token") from error
        finally:
            await caller.close()
        if not allowed:
            raise LogsUnavailable(403, f"you may not get trainjobs {name} in namespace "
                                       f"{namespace} on the manager, so not its logs")


def _query(namespace: str, name: str, request: web.Request) -> LogQuery:
    params = request.query

    def number(key: str) -> int | None:
        text = params.get(key)
        if text is None or text == "":
            return None
        if not text.isdigit():
            raise LogsUnavailable(400, f"{key} must be a whole number >= 0, not {text!r}")
        return int(text)

    def flag(key: str) -> bool:
        return params.get(key, "false").lower() in ("true", "1", "yes")

    return LogQuery(
        namespace=namespace, name=name, container=params.get("container") or None,
        replicated_job=params.get("replicatedJob") or None, node_rank=number("nodeRank"),
        options=LogOptions(follow=flag("follow"), tail_lines=number("tailLines"),
                           since_seconds=number("sinceSeconds"), timestamps=flag("timestamps")))
