"""FastAPI application factory and the server's start-up and shutdown."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from taugrid import __version__
from taugrid.errors import AuthError, TauError
from taugrid.executors.local.executor import LocalExecutor
from taugrid.executors.local.gpus import machine_cpus_millis, machine_memory_bytes, probe_gpus
from taugrid.executors.local.secrets import LocalSecretStore
from taugrid.home import server_info_path, token_path
from taugrid.server.auth import ensure_token, token_matches
from taugrid.server.engine import RunEngine
from taugrid.server.queueing import Machine, Queueing
from taugrid.server.routes import router
from taugrid.server.schemas import Health
from taugrid.server.secret_routes import router as secret_router
from taugrid.server.services import RunService
from taugrid.server.settings import ServerSettings
from taugrid.store import RunStore, connect
from taugrid.store.policies import PolicyStore

log = logging.getLogger("taugrid.server")


def create_app(settings: ServerSettings, *, public_url: str | None = None) -> FastAPI:
    """Build the app. ``public_url`` is published in server.json once start-up is done."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        home = settings.home
        home.mkdir(parents=True, exist_ok=True)
        token = ensure_token(token_path(home))
        db = connect(settings.db_url)
        store = RunStore(db)
        machine = Machine(
            tuple(probe_gpus(settings.gpus)), machine_cpus_millis(), machine_memory_bytes()
        )
        queueing = Queueing(PolicyStore(db), machine)
        notify = f"{public_url}/api/v1/internal/attempt-status" if public_url else None
        executor = LocalExecutor(settings.runs_dir, notify_url=notify, token_file=token_path(home))
        engine = RunEngine(
            store,
            executor,
            queueing,
            snapshots_dir=settings.snapshots_dir,
            poll_interval_s=settings.poll_interval_s,
            retention_s=settings.retention_s,
            secrets_dir=home / "secrets",
        )
        secrets = LocalSecretStore(home / "secrets")
        app.state.token = token
        app.state.secrets = secrets
        app.state.service = RunService(
            store, executor, engine, queueing, settings.snapshots_dir, secrets
        )
        engine.step()  # re-adopt or finalise runs left by a previous server before serving
        engine.start()
        if public_url:
            _publish(settings, public_url)
        try:
            yield
        finally:
            engine.stop()
            if public_url:
                _unpublish(settings)
            store.engine.dispose()

    app = FastAPI(
        title="TauGrid",
        version=__version__,
        lifespan=lifespan,
        openapi_url="/api/v1/openapi.json",
        docs_url="/api/v1/docs",
        redoc_url=None,
    )

    @app.exception_handler(TauError)
    async def tau_error(_request: Request, exc: TauError) -> JSONResponse:
        return _error(exc)

    @app.get("/healthz", response_model=Health)
    def healthz(request: Request) -> Health:
        return Health(
            status="ok", version=__version__, runs=request.app.state.service.store.count()
        )

    # Every /api/v1 route needs the token (a dependency, not an HTTP middleware: Starlette's
    # middleware wrapper costs more per request than the rest of a small request).
    app.include_router(router, dependencies=[Depends(require_token)])
    app.include_router(secret_router, dependencies=[Depends(require_token)])
    return app


def require_token(request: Request) -> None:
    if not token_matches(request.headers.get("authorization"), request.app.state.token):
        raise AuthError("missing or wrong API token")


def _error(exc: TauError) -> JSONResponse:
    return JSONResponse({"error": exc.to_dict()}, status_code=exc.http_status)


def _publish(settings: ServerSettings, url: str) -> None:
    path = server_info_path(settings.home)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), "version": __version__}))
    os.replace(tmp, path)


def _unpublish(settings: ServerSettings) -> None:
    path = server_info_path(settings.home)
    try:
        info = json.loads(path.read_text())
        if info.get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
