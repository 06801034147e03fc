"""Serving the metrics: ``GET /metrics``, the optional metrics port, and the API request
timer.

Who may scrape (docs/observability.md): a local server answers ``/metrics`` on its own
loopback URL without a token (the metrics hold no secrets and no run ids); a shared server
answers only a scraper that sends the scrape token (``--metrics-token-file``), or serves
them on a separate port (``--metrics-port``) that the platform exposes to Prometheus
alone. The scrape token is not an API token: it reads the metrics and nothing else.
"""

from __future__ import annotations

import hmac
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest, start_http_server
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taugrid.errors import AuthError, NotFound
from taugrid.server.metrics import ServerMetrics

router = APIRouter()
UNMATCHED = "unmatched"  # a path no route took: one label value, never the path itself


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    state = request.app.state
    gate: ScrapeGate = state.scrape_gate
    gate.check(request.headers.get("authorization"))
    server_metrics: ServerMetrics = state.metrics
    body = await run_in_threadpool(generate_latest, server_metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


class ScrapeGate:
    """Whether a request may read /metrics on the API port (see the module)."""

    def __init__(self, *, shared: bool, token_file: Path | None) -> None:
        self.shared = shared
        self.token = _read_token(token_file) if token_file is not None else None

    def check(self, header: str | None) -> None:
        if not self.shared:
            return
        if self.token is None:
            raise NotFound(
                "a shared server serves /metrics to a scraper holding the scrape token "
                "(--metrics-token-file) or on its metrics port (--metrics-port)"
            )
        scheme, _, given = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), self.token):
            raise AuthError("/metrics needs the scrape token: Authorization: Bearer TOKEN")


def _read_token(path: Path) -> str:
    token = path.read_text().strip()
    if len(token) < 16:
        raise ValueError(f"the scrape token in {path} is shorter than 16 characters")
    return token


class MetricsPort:
    """prometheus-client's own HTTP server on ``host:port``, for the registry alone."""

    def __init__(self, registry: Any, host: str, port: int) -> None:
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class RequestMetrics:
    """ASGI wrapper timing every HTTP request into ``taugrid_http_request_duration_seconds``
    by method, route template (``/api/v1/runs/{ref}``: the router leaves the route it
    matched in the scope) and status class. A plain wrapper, like RequestGuard: about a
    microsecond and a half of bookkeeping on top of prometheus-client's observe."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self._children: dict[tuple[str, str, str], Any] = {}
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            self._child(scope["method"], template, status).observe(time.perf_counter() - started)

    def _child(self, method: str, route: str, status: int) -> Any:
        key = (method if method in _METHODS else "other", route, f"{status // 100}xx")
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children[key] = self.metrics.requests.labels(*key)
        return child


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
