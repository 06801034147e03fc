"""FastAPI application factory and the server's start-up and shutdown."""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool

from taugrid import __version__
from taugrid.domain.access import AGENT_KIND, AGENT_ROUTE
from taugrid.domain.health.effects import Breaker
from taugrid.domain.states import RunState
from taugrid.errors import Conflict, DiskFull, Forbidden, TauError
from taugrid.executors.local.artifacts import LocalArtifactStore
from taugrid.executors.local.executor import LocalExecutor
from taugrid.executors.local.gpus import (
    LocalDeviceInventory,
    machine_cpus_millis,
    machine_memory_bytes,
    probe_gpus,
)
from taugrid.executors.local.logmask import line_masker
from taugrid.executors.local.logs import LocalLogSource
from taugrid.executors.local.secrets import LocalSecretStore
from taugrid.health.kmsg import KmsgSource
from taugrid.health.nvml import NvmlEventSource, NvmlPollSource
from taugrid.health.replay import ReplaySource
from taugrid.health.usage import NvmlUsage
from taugrid.health.watchdog import Watched
from taugrid.home import server_info_path, token_path
from taugrid.ports.artifacts import ArtifactStore
from taugrid.ports.devices import GpuUsage
from taugrid.ports.executor import Executor
from taugrid.ports.health import FaultSource
from taugrid.ports.logs import LogSource
from taugrid.ports.secrets import SecretStore
from taugrid.server import error_answers
from taugrid.server.access_routes import router as access_router
from taugrid.server.admission import AdmissionStrategy, InternalAdmission, ObservedAdmission
from taugrid.server.auth import Authenticator, ensure_token
from taugrid.server.check_routes import router as check_router
from taugrid.server.client_address import parse_trusted_proxies, request_source
from taugrid.server.cluster import ClusterAdapters, cluster_adapters
from taugrid.server.cluster_check_routes import router as cluster_check_router
from taugrid.server.code_fetch import load_code_key
from taugrid.server.code_fetch import router as code_router
from taugrid.server.diskspace import DiskSpace, is_disk_full, parse_headroom
from taugrid.server.engine import RunEngine
from taugrid.server.gpu_use import GpuUseTracker, cluster_places, local_places
from taugrid.server.health import DEADLINE_S, NODE, HealthMonitor
from taugrid.server.health_cluster import ClusterHealthController
from taugrid.server.health_routes import router as health_router
from taugrid.server.identity_service import IdentityService
from taugrid.server.info_routes import router as info_router
from taugrid.server.metrics import ServerMetrics
from taugrid.server.metrics_http import MetricsPort, RequestMetrics, ScrapeGate
from taugrid.server.metrics_http import router as metrics_router
from taugrid.server.oidc import SESSION_COOKIE, oidc_login
from taugrid.server.oidc_routes import router as oidc_router
from taugrid.server.pod_reports import router as reports_router
from taugrid.server.policy_file import apply_policy_file
from taugrid.server.portal.login import link_router as portal_link_router
from taugrid.server.portal.mount import error_page, mount_portal
from taugrid.server.portal_session import CSRF_HEADER, SAFE_METHODS, csrf_ok, session_caller
from taugrid.server.queueing import Machine, Queueing
from taugrid.server.request_guard import RequestGuard, bounded_json
from taugrid.server.routes import router
from taugrid.server.sandboxing import sandbox_policy
from taugrid.server.schemas import Health
from taugrid.server.secret_routes import router as secret_router
from taugrid.server.services import RunService
from taugrid.server.settings import ServerSettings, parse_breaker, published_facts
from taugrid.server.tracing import start_tracing
from taugrid.spec.units import quantity_bytes
from taugrid.store import RunStore, connect
from taugrid.store.health import HealthStore
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
        identity = IdentityStore(db)
        code_key = load_code_key(home)  # signs the pods' code tokens
        local = _local_adapters(settings, public_url)
        kube = (
            cluster_adapters(settings, local, code_key, store.workspace_of, make_masker=line_masker)
            if settings.cluster
            else None
        )
        machine = Machine(
            () if kube else tuple(local.devices.devices()),
            machine_cpus_millis(),
            machine_memory_bytes(),
        )

        def workspace_names() -> list[str]:
            # One notion of workspace: the built-in policy gives each known one its queue.
            return [w["name"] for w in identity.workspaces()]

        queueing = Queueing(
            PolicyStore(db),
            machine,
            workspace_names,
            local.devices,
            policy_target=kube.policy_target if kube else None,
        )
        # The chart's policy file, in force before the first pass (server/policy_file.py).
        app.state.policy_file = (
            apply_policy_file(settings.policy_file, queueing, identity)
            if settings.policy_file is not None
            else None
        )
        app.state.cluster_inspector = kube.inspector if kube else None  # cluster check
        # Headroom for new work and a reserve for state changes (server/diskspace.py).
        disk = app.state.disk = DiskSpace(home, parse_headroom(settings.min_free_disk))
        disk.maintain()
        executor: Executor = kube.executor if kube else local.executor
        artifacts: ArtifactStore = kube.artifacts if kube else local.artifacts
        secrets: SecretStore = kube.secrets if kube else local.secrets
        logs: LogSource = kube.logs if kube else local.logs
        admission: AdmissionStrategy = (
            ObservedAdmission(kube.admission, "Kueue", explain=kube.admission.pending)
            if kube
            else InternalAdmission(queueing, store.gpus_in_use, disk)  # local mode decides
        )
        engine = RunEngine(
            store,
            executor,
            admission,
            artifacts=artifacts,
            secrets=secrets,
            devices=None if kube else local.devices,
            poll_interval_s=settings.poll_interval_s,
            retention_s=settings.retention_s,
            disk=disk,
            run_disk_limit_bytes=(
                quantity_bytes(settings.run_disk_limit) if settings.run_disk_limit else None
            ),
        )
        if settings.shared:
            bootstrap_admin(identity, home)
        app.state.token = token
        app.state.code_key = code_key
        app.state.artifacts = artifacts
        app.state.pod_reports = kube.reports if kube else None  # server.pod_reports
        # What the mode accepts (spec/modes.py): GET /api/v1/server and every submit.
        caps = app.state.capabilities = executor.capabilities
        app.state.identity = identity
        app.state.auth = Authenticator(token, identity)
        app.state.oidc = oidc_login(settings, identity)  # None: OIDC routes answer 404
        app.state.secrets = secrets
        # GPU use of the running runs, where NVML reads the GPUs (server/gpu_use.py).
        gpu_use = app.state.gpu_use = gpu_use_tracker(
            settings, store, local, kube, engine, queueing
        )
        # OpenTelemetry spans of the submit -> running path; off: a no-op (server/tracing.py).
        tracing = app.state.tracing = start_tracing(settings.otel_endpoint)
        app.state.service = RunService(
            store,
            engine,
            queueing,
            secrets=secrets,
            artifacts=artifacts,
            logs=logs,
            capabilities=caps,
            gpu_use=gpu_use,
            tracing=tracing,
        )
        app.state.identity_service = IdentityService(identity, store, queueing)
        app.state.machine_gpus = machine.gpus
        health = app.state.health = (
            None if kube else health_monitor(settings, store, HealthStore(db), local, engine)
        )
        if health is not None:
            health.restore()  # GPUs out of service stay out, from the first pass on
        cluster_health = app.state.health_cluster = (
            cluster_health_controller(settings, HealthStore(db), kube, engine) if kube else None
        )
        if cluster_health is not None:
            cluster_health.restore()
            cluster_health.start()
        port = None
        if metrics is not None:
            _watch(metrics, settings, store, engine, artifacts, machine, health or cluster_health)
            if gpu_use is not None:
                metrics.watch_gpu_use(gpu_use.latest_by_gpu, gpu_use.flagged)
            if settings.metrics_port:
                port = MetricsPort(metrics.registry, settings.host, settings.metrics_port)
        tracing.watch(engine)
        if kube is not None:
            kube.start(engine, queueing)  # informers listed before the first pass
        engine.step()  # re-adopt or finalise runs left by a previous server before serving
        engine.start()
        if health is not None:
            health.start()
        if gpu_use is not None:
            gpu_use.start()
        if public_url:
            _publish(settings, public_url, len(machine.gpus))
            log.info(
                "serving %s (TauGrid %s, %s, %s executor)",
                public_url,
                __version__,
                "shared" if settings.shared else "local",
                settings.executor,
            )
        try:
            yield
        finally:
            if port is not None:
                port.close()
            if gpu_use is not None:
                gpu_use.stop()
            if health is not None:
                health.stop()
            if cluster_health is not None:
                cluster_health.stop()
            engine.stop()
            tracing.close()  # the spans still buffered are sent
            if kube is not None:
                kube.close()
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
    app.state.trusted_proxies = parse_trusted_proxies(settings.trusted_proxies)
    # Metrics (server/metrics.py): one registry per app; off, there are no instruments.
    metrics = app.state.metrics = ServerMetrics() if settings.metrics == "on" else None
    app.state.scrape_gate = ScrapeGate(
        shared=settings.shared, token_file=settings.metrics_token_file
    )
    # JSON bodies bounded, unhandled errors answered as JSON (server/request_guard.py: a
    # plain ASGI wrapper, about 15 us a request, not Starlette's costly BaseHTTPMiddleware),
    # and every error in the documented shape, never echoing the request (error_answers.py).
    app.add_middleware(RequestGuard)
    if metrics is not None:  # outermost: it times what the client waits for, errors too
        app.add_middleware(RequestMetrics, metrics=metrics)
    error_answers.install(app, pages=error_page)  # the portal's paths answer with pages

    async def disk_full(request: Request, exc: Exception) -> JSONResponse:
        # Any "no space" error (ENOSPC, EDQUOT, SQLite or PostgreSQL full) is the JSON
        # disk_full error; anything else goes on to the generic 500.
        if not is_disk_full(exc):
            raise exc
        disk: DiskSpace | None = getattr(request.app.state, "disk", None)
        if disk is not None:
            disk.note_full()  # the reserve goes back so state changes can commit
        return _error(
            DiskFull(
                "the disk holding TAU_HOME is full; nothing was changed. Free some space "
                "(e.g. remove finished runs' files) and try again"
            )
        )

    app.add_exception_handler(OSError, disk_full)
    app.add_exception_handler(DBAPIError, disk_full)

    @app.get("/healthz", response_model=Health)
    def healthz(request: Request) -> Health:
        return Health(
            status="ok", version=__version__, runs=request.app.state.service.store.count()
        )

    # Every /api/v1 route needs the token (a dependency, not an HTTP middleware: Starlette's
    # middleware wrapper costs more per request than the rest of a small request).
    app.include_router(router, dependencies=[Depends(require_token)])
    app.include_router(access_router, dependencies=[Depends(require_token)])
    app.include_router(secret_router, dependencies=[Depends(require_token)])
    app.include_router(check_router, dependencies=[Depends(require_token)])
    app.include_router(info_router, dependencies=[Depends(require_token)])
    app.include_router(health_router, dependencies=[Depends(require_token)])
    app.include_router(cluster_check_router, dependencies=[Depends(require_token)])
    app.include_router(portal_link_router, dependencies=[Depends(require_token)])
    mount_portal(app)  # its pages check the session themselves (server/portal/access.py)
    app.include_router(oidc_router, dependencies=[Depends(bounded_json)])  # login: no token yet
    app.include_router(code_router)  # pods: their attempt's code token, checked by the route
    app.include_router(reports_router, dependencies=[Depends(bounded_json)])  # report token
    if metrics is not None:
        app.include_router(metrics_router)  # its own gate: no token locally, a scrape token
    return app


def _watch(
    metrics: ServerMetrics,
    settings: ServerSettings,
    store: RunStore,
    engine: RunEngine,
    artifacts: ArtifactStore,
    machine: Machine,
    health: HealthMonitor | ClusterHealthController | None,
) -> None:
    """Feed the metrics from the engine and let them read the stores at scrape time."""
    engine.observe_moves(metrics.moved)
    engine.on_pass = metrics.engine_passed
    records = HealthStore(store.engine)
    metrics.watch(
        store,
        artifacts=artifacts,
        machine_gpus=(lambda: None) if settings.cluster else (lambda: len(machine.gpus)),
        quarantined=lambda: len(records.quarantined()),
        health=health,
        health_mode=settings.health,
        agents=health.agents_summary if isinstance(health, ClusterHealthController) else None,
    )


async def require_token(request: Request) -> None:
    """Who calls: request.state.caller for the routes; 401 (or 429) otherwise. Then the
    JSON body's nesting bound (``bounded_json``: one dependency does both, each costs).

    Async so that the local token, most requests of a local server, is checked on the
    event loop: a sync dependency costs a hop through the thread pool per request. API
    tokens are looked up in the database, in the thread pool.
    """
    source = request_source(request)  # the peer, or the client a trusted proxy names
    auth: Authenticator = request.app.state.auth
    header = request.headers.get("authorization")
    session = request.cookies.get(SESSION_COOKIE) if header is None else None
    if session is not None:  # the portal's session (its pages' downloads, say)
        if request.method not in SAFE_METHODS and not csrf_ok(
            auth.local_token, session, request.headers.get(CSRF_HEADER)
        ):
            raise Forbidden("a change made with the portal's session needs its CSRF token")
        caller = await session_caller(auth, session, source)
    else:
        local = auth.local_caller(header)
        caller = (
            local if local is not None else await run_in_threadpool(auth.caller, header, source)
        )
    if caller.kind == AGENT_KIND and request.url.path != AGENT_ROUTE:
        raise Forbidden("an agent's token sends GPU health reports and does nothing else")
    request.state.caller = caller
    await bounded_json(request)


@dataclass(frozen=True)
class LocalAdapters:
    """The ports' local implementations (``taugrid.executors.local``). This module is the
    one place that builds them (import-linter keeps it so); a cluster mode builds its
    own set behind the same ports."""

    executor: LocalExecutor
    artifacts: LocalArtifactStore
    logs: LocalLogSource
    secrets: LocalSecretStore
    devices: LocalDeviceInventory


def _local_adapters(settings: ServerSettings, public_url: str | None) -> LocalAdapters:
    home = settings.home
    notify = f"{public_url}/api/v1/internal/attempt-status" if public_url else None
    executor = LocalExecutor(
        settings.runs_dir,
        snapshots_dir=settings.snapshots_dir,
        notify_url=notify,
        token_file=token_path(home),
        sandbox=sandbox_policy(settings),  # None: workloads run as the server's user
    )
    artifacts = LocalArtifactStore(executor, settings.snapshots_dir)
    artifacts.look_for_leftovers()  # workdirs a previous server set aside, in the background
    secrets = LocalSecretStore(home / "secrets")
    if moved := secrets.migrate_flat_layout():  # secrets of before workspaces
        log.info("moved %d secrets of the flat layout into workspace 'default'", moved)
    devices = LocalDeviceInventory(probe_gpus(settings.gpus))
    return LocalAdapters(executor, artifacts, LocalLogSource(executor), secrets, devices)


def health_monitor(
    settings: ServerSettings,
    store: RunStore,
    records: HealthStore,
    local: LocalAdapters,
    engine: RunEngine,
) -> HealthMonitor | None:
    """The local GPU health monitor and its sources (server/health.py); None when off."""
    if settings.health == "off":
        return None
    sources: list[FaultSource] = []
    real = settings.gpus is None and bool(local.devices.devices())  # probed through NVML
    if real:  # NVML's own events first, then its counters every 15 s
        sources += [NvmlEventSource(NODE), NvmlPollSource(NODE)]
    kmsg = settings.health_kmsg or ("/dev/kmsg" if real else None)
    if kmsg:  # the kernel log says what NVML may not (or not yet)
        pci = {g.pci: g.uuid for g in local.devices.devices() if g.pci}
        sources.append(KmsgSource(kmsg, node=NODE, pci_to_gpu=pci))
    if settings.health_replay is not None:
        sources.append(ReplaySource(settings.health_replay, node=NODE))
    return HealthMonitor(
        records,
        local.devices,
        engine,
        store.gpu_holders,
        [Watched(s, node=NODE, deadline_s=DEADLINE_S) for s in sources],
        shadow=settings.health == "shadow",
        breaker=Breaker(*parse_breaker(settings.health_breaker)),
    )


def gpu_use_tracker(
    settings: ServerSettings,
    store: RunStore,
    local: LocalAdapters,
    kube: ClusterAdapters | None,
    engine: RunEngine,
    queueing: Queueing,
) -> GpuUseTracker | None:
    """Sampling the running runs' GPU use (server/gpu_use.py): through NVML where it reads
    the GPUs (not declared ones: nothing there to read, and a guess would look like
    idleness), or on a cluster from the DCGM exporter's series in its Prometheus."""
    usage: GpuUsage
    if kube is not None:
        if kube.gpu_usage is None:
            return None
        usage = kube.gpu_usage
        running = functools.partial(store.in_states, [RunState.RUNNING], light=True)
        places = cluster_places(running, kube.namespace_of)
    else:
        if settings.gpus is not None or not local.devices.devices():
            return None
        usage, places = NvmlUsage(), local_places(store.gpu_holders)
    return GpuUseTracker(usage, places, lambda: queueing.policy.domain.idle, store, engine)


def cluster_health_controller(
    settings: ServerSettings, records: HealthStore, kube: ClusterAdapters, engine: RunEngine
) -> ClusterHealthController | None:
    """The cluster's GPU health controller (server/health_cluster.py): it acts on what
    the nodes' agents report; None when off."""
    if settings.health == "off":
        return None
    return ClusterHealthController(
        records,
        kube.nodes,
        engine,
        shadow=settings.health == "shadow",
        breaker=Breaker(*parse_breaker(settings.health_breaker)),
    )


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


def _publish(settings: ServerSettings, url: str, gpus: int) -> None:
    path = server_info_path(settings.home)
    tmp = path.with_suffix(".tmp")
    facts = published_facts(settings, gpus)  # GPUs, isolation, database: tau server status
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), "version": __version__, **facts}))
    os.replace(tmp, path)


def _unpublish(settings: ServerSettings) -> None:
    path = server_info_path(settings.home)
    try:
        info = json.loads(path.read_text())
        if info.get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
