"""FastAPI application factory and the server's start-up and shutdown."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from taugrid import __version__
from taugrid.errors import Conflict, TauError
from taugrid.executors.local.executor import LocalExecutor
from taugrid.executors.local.gpus import machine_cpus_millis, machine_memory_bytes, probe_gpus
from taugrid.executors.local.secrets import LocalSecretStore
from taugrid.home import server_info_path, token_path
from taugrid.server.access_routes import router as access_router
from taugrid.server.auth import Authenticator, ensure_token
from taugrid.server.engine import RunEngine
from taugrid.server.oidc import SESSION_COOKIE, oidc_login
from taugrid.server.oidc_routes import router as oidc_router
from taugrid.server.queueing import Machine, Queueing
from taugrid.server.routes import require_admin, router
from taugrid.server.schemas import Health
from taugrid.server.secret_routes import router as secret_router
from taugrid.server.services import RunService
from taugrid.server.settings import ServerSettings
from taugrid.store import RunStore, connect
from taugrid.store.identity import IdentityStore
from taugrid.store.policies import PolicyStore

BOOTSTRAP_TOKEN_FILE = "admin-token"

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
        identity = IdentityStore(db)
        if settings.shared:
            bootstrap_admin(identity, home)
        app.state.token = token
        app.state.identity = identity
        app.state.auth = Authenticator(token, identity)
        app.state.oidc = oidc_login(settings, identity)  # None: OIDC routes answer 404
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
    app.include_router(access_router, dependencies=[Depends(require_token)])
    app.include_router(secret_router, dependencies=[Depends(require_token), Depends(_admin_only)])
    app.include_router(oidc_router)  # login: no token yet
    return app


def require_token(request: Request) -> None:
    """Who calls: request.state.caller for the routes; 401 (or 429) otherwise."""
    source = request.client.host if request.client else "unknown"
    auth: Authenticator = request.app.state.auth
    header = request.headers.get("authorization")
    if header is None and SESSION_COOKIE in request.cookies:  # the portal's OIDC session
        header = f"Bearer {request.cookies[SESSION_COOKIE]}"
    request.state.caller = auth.caller(header, source)


def _admin_only(request: Request) -> None:
    # Secrets are one store per server for now: only platform admins manage them.
    require_admin(request)


def bootstrap_admin(identity: IdentityStore, home: Path) -> None:
    """A shared server's first admin: user ``admin`` and a token in a 0600 file, written
    once (``tau server start --shared`` prints it)."""
    path = home / BOOTSTRAP_TOKEN_FILE
    if path.exists() or any(u["admin"] for u in identity.users()):
        return
    with suppress(Conflict):
        identity.add_user("admin", admin=True)
    made = identity.create_token("admin", name="bootstrap")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(made.secret + "\n")


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
