"""What the API's request guards cost per request, measured in-process.

``python -m bench.api_guard_overhead [ROUNDS]``. Three copies of the real app (each with
its own TAU_HOME, lifespans running) are driven by direct ASGI calls, so the network and
uvicorn do not drown the difference, in interleaved rounds of 50 requests:

- ``now``: the app as built: the RequestGuard ASGI wrapper (JSON size bound, JSON 500),
  and the async token check that also bounds JSON nesting;
- ``no-guard``: the same without RequestGuard;
- ``sync-token-check``: the token check as it was before (a sync dependency, so a
  thread-pool hop per request, and no nesting check).

Requests: ``GET /api/v1/whoami`` and ``POST /api/v1/internal/attempt-status`` (a small JSON
body), both with the local token. Prints the median over rounds of the mean per request.
Not part of ``bench.all``: no target, a figure for docs/api.md.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request

from taugrid.server.app import create_app, require_token
from taugrid.server.request_guard import RequestGuard
from taugrid.server.settings import ServerSettings

BATCH = 50


def sync_token_check(request: Request) -> None:
    """The token check before: a sync dependency FastAPI runs in its thread pool."""
    source = request.client.host if request.client else "unknown"
    auth = request.app.state.auth
    request.state.caller = auth.caller(request.headers.get("authorization"), source)


async def call(app: FastAPI, method: str, path: str, body: bytes, token: str) -> int:
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {token}".encode())]
    if body:
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 80),
        "root_path": "",
        "state": {},
    }
    delivered = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # no disconnect while the answer is sent
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def variants(home: Path) -> dict[str, FastAPI]:
    apps = {}
    for name in ("now", "no-guard", "sync-token-check"):
        app = create_app(ServerSettings.from_env(home / name, gpus=0))
        if name == "no-guard":
            app.user_middleware = [m for m in app.user_middleware if m.cls is not RequestGuard]
        if name == "sync-token-check":
            app.dependency_overrides[require_token] = sync_token_check
        apps[name] = app
    return apps


async def measure(rounds: int) -> dict[tuple[str, str], float]:
    home = Path(tempfile.mkdtemp(prefix="tau-bench-guard-"))
    apps = variants(home)
    body = json.dumps({"attempt_dir": "/nowhere", "status": {"phase": "running"}}).encode()
    requests = {
        "GET /whoami": ("GET", "/api/v1/whoami", b""),
        "POST attempt-status": ("POST", "/api/v1/internal/attempt-status", body),
    }
    lifespans = [app.router.lifespan_context(app) for app in apps.values()]
    for lifespan in lifespans:
        await lifespan.__aenter__()
    try:
        tokens = {name: (home / name / "token").read_text().strip() for name in apps}
        samples: dict[tuple[str, str], list[float]] = {(n, r): [] for n in apps for r in requests}
        for _ in range(rounds):
            for name, app in apps.items():
                for label, (method, path, data) in requests.items():
                    start = time.perf_counter()
                    for _ in range(BATCH):
                        status = await call(app, method, path, data, tokens[name])
                        assert status in (200, 204), (name, label, status)
                    samples[(name, label)].append((time.perf_counter() - start) / BATCH)
        return {key: statistics.median(v) * 1e6 for key, v in samples.items()}
    finally:
        for lifespan in lifespans:
            await lifespan.__aexit__(None, None, None)


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 30
    result = asyncio.run(measure(rounds))
    for (name, label), us in result.items():
        print(f"{name:17} {label:20} {us:8.1f} us per request (median of {rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
