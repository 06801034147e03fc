"""``python -m taugrid.server``: what ``tau server start`` and the CLI's auto-start run."""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import logging
import os
import socket
import sys
from pathlib import Path

from taugrid.home import tau_home
from taugrid.net import is_loopback_host


def main(argv: list[str] | None = None) -> int:
    # Everything the server and its supervisors create in TAU_HOME is private from the
    # start (private_home checks what already exists).
    os.umask(0o077)
    ap = argparse.ArgumentParser(prog="tau-server")
    ap.add_argument("--home", type=Path, default=None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument(
        "--gpus",
        default=None,
        metavar="N|auto",
        help="GPUs to offer, remembered for later starts of this home; auto: detect them "
        "(default TAU_LOCAL_GPUS for this start, else the remembered count, else auto)",
    )
    ap.add_argument("--database-url", default=None)
    ap.add_argument(
        "--shared",
        action="store_true",
        help="A server for several people: API tokens and roles; may bind beyond loopback",
    )
    ap.add_argument(
        "--retention",
        default=None,
        help="Keep finished runs' files this long, e.g. 30d, or 'never' (default TAU_RETENTION "
        "or 30d)",
    )
    ap.add_argument("--oidc-issuer", default=None, help="OIDC provider (default TAU_OIDC_ISSUER)")
    ap.add_argument("--oidc-client-id", default=None)
    ap.add_argument(
        "--oidc-client-secret-file", type=Path, default=None, help="File holding the secret"
    )
    ap.add_argument("--oidc-user-claim", default=None, help="Claim naming the user (email)")
    ap.add_argument("--oidc-groups-claim", default=None, help="Claim listing groups (groups)")
    ap.add_argument(
        "--min-free-disk",
        default=None,
        help="Refuse new runs while TAU_HOME's disk has less free, e.g. 256Mi or 1%% "
        "(default TAU_MIN_FREE_DISK or 256Mi; 0: off)",
    )
    ap.add_argument(
        "--run-disk-limit",
        default=None,
        help="Disk space a run's files may take unless its resources.disk says, e.g. 20Gi "
        "(default TAU_RUN_DISK_LIMIT, or no limit)",
    )
    ap.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="CIDR",
        help="A reverse proxy whose X-Forwarded-For names the client (repeatable; default "
        "TAU_TRUSTED_PROXIES)",
    )
    ap.add_argument(
        "--isolation",
        choices=("none", "sandbox"),
        default=None,
        help="Run workloads as the server's user (none) or each in a sandbox seeing only its "
        "own run (sandbox; required with --shared). Default TAU_ISOLATION, else sandbox "
        "when shared, none otherwise",
    )
    ap.add_argument("--bwrap", default=None, help="bubblewrap binary (default TAU_BWRAP or bwrap)")
    ap.add_argument(
        "--sandbox-bind",
        action="append",
        default=[],
        metavar="PATH",
        help="Show PATH read-only in every sandbox (repeatable; default TAU_SANDBOX_BINDS)",
    )
    ap.add_argument(
        "--workload-uids",
        default=None,
        metavar="FIRST-LAST",
        help="Uids for sandboxed runs when the server runs as root, one per run (default "
        "TAU_WORKLOAD_UIDS or 2000000-2999999)",
    )
    ap.add_argument(
        "--executor",
        choices=("local", "kubernetes"),
        default=None,
        help="Where runs run (default TAU_EXECUTOR or local)",
    )
    ap.add_argument("--kubeconfig", type=Path, default=None, help="kubeconfig (default KUBECONFIG)")
    ap.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    ap.add_argument("--namespace-prefix", default=None, help="namespace of workspace W: PREFIX+W")
    ap.add_argument("--pod-server-url", default=None, help="how pods reach this server")
    ap.add_argument("--health", choices=["on", "shadow", "off"], default=None, help="GPU health")
    ap.add_argument("--health-replay", type=Path, default=None, help="replay observations")
    ap.add_argument("--health-breaker", default=None, help="SHARE%%/WINDOW, e.g. 20%%/10m")
    ap.add_argument(
        "--metrics",
        choices=("on", "off"),
        default=None,
        help="Prometheus metrics on /metrics (default TAU_METRICS or on)",
    )
    ap.add_argument(
        "--metrics-port",
        default=None,
        help="Serve Prometheus /metrics on this port too, without auth (default TAU_METRICS_PORT)",
    )
    ap.add_argument(
        "--metrics-token-file",
        type=Path,
        default=None,
        help="File holding the token a scraper sends for /metrics on a shared server "
        "(default TAU_METRICS_TOKEN_FILE)",
    )
    ap.add_argument(
        "--log-format", choices=("text", "json"), default=None, help="text or json log lines"
    )
    ap.add_argument(
        "--prometheus-url",
        default=None,
        help="A cluster's Prometheus, for the runs' GPU use from the DCGM exporter "
        "(default TAU_PROMETHEUS_URL)",
    )
    ap.add_argument(
        "--policy-file",
        type=Path,
        default=None,
        help="Apply this policy.yaml at start when it differs from the policy in force "
        "(default TAU_POLICY_FILE)",
    )
    ap.add_argument(
        "--otel-endpoint",
        default=None,
        metavar="URL",
        help="Send OpenTelemetry traces of the submit-to-running path to this OTLP/HTTP "
        "collector, e.g. http://127.0.0.1:4318 (default TAU_OTEL_ENDPOINT, else "
        "OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT; needs the otel extra)",
    )
    ap.add_argument(
        "--migrate-only",
        action="store_true",
        help="Bring the database (--database-url, TAU_DATABASE_URL or TAU_HOME's SQLite) to "
        "the newest schema and exit: the Helm chart's pre-upgrade Job",
    )
    args = ap.parse_args(argv)
    if args.migrate_only:
        return migrate_only(args.database_url, args.home)
    if not args.shared and not is_loopback_host(args.host):
        print(
            f"a local server binds to loopback only; --host {args.host} needs --shared",
            file=sys.stderr,
        )
        return 2

    import uvicorn

    # Request threads hand the GIL to each other around every fsync; the default 5 ms
    # switch interval makes a thread that finished its I/O wait that long to go on, and
    # write throughput collapses into a convoy. 0.5 ms keeps the hand-over short.
    sys.setswitchinterval(0.0005)

    from taugrid.server.app import create_app
    from taugrid.server.settings import ServerSettings, parse_retention

    home = (args.home or tau_home()).resolve()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # The Kubernetes client's HTTP library logs every request (each watch) at INFO.
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from taugrid.server.private_home import tighten

    tighten(home)
    # One server per TAU_HOME: the lock lives as long as this process, even after kill -9.
    lock = os.open(home / "server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"another tau server already runs for {home}", file=sys.stderr)
        return 3
    from taugrid.server.settings import (
        declared_gpus,
        downgrade_problem,
        remember_gpus,
        remember_mode,
    )

    try:
        gpus = declared_gpus(home, args.gpus)
        settings = ServerSettings.from_env(
            home,
            host=args.host,
            port=args.port,
            db_url=args.database_url,
            oidc_issuer=args.oidc_issuer,
            oidc_client_id=args.oidc_client_id,
            oidc_client_secret_file=args.oidc_client_secret_file,
            oidc_user_claim=args.oidc_user_claim,
            oidc_groups_claim=args.oidc_groups_claim,
            trusted_proxies=tuple(args.trusted_proxy) or None,
            min_free_disk=args.min_free_disk,
            run_disk_limit=args.run_disk_limit,
            isolation=args.isolation,
            bwrap=args.bwrap,
            sandbox_binds=tuple(args.sandbox_bind) or None,
            workload_uids=args.workload_uids,
            executor=args.executor,
            kubeconfig=args.kubeconfig,
            kube_context=args.context,
            namespace_prefix=args.namespace_prefix,
            pod_server_url=args.pod_server_url,
            health=args.health,
            health_replay=args.health_replay,
            health_breaker=args.health_breaker,
            metrics=args.metrics,
            metrics_port=args.metrics_port,
            metrics_token_file=args.metrics_token_file,
            log_format=args.log_format,
            prometheus_url=args.prometheus_url,
            policy_file=args.policy_file,
            otel_endpoint=args.otel_endpoint,
        )
    except ValueError as exc:  # a GPU count that is not one
        print(exc, file=sys.stderr)
        return 2
    settings = dataclasses.replace(settings, gpus=gpus)  # --gpus auto wins over the env
    if settings.log_format == "json":
        from taugrid.server.logformat import use_json_lines

        use_json_lines()
    if settings.health_replay is not None:  # a drill's file: refused whole, with its line
        from taugrid.health.replay import ReplaySource
        from taugrid.ports.health import SourceError
        from taugrid.server.health import NODE

        try:
            ReplaySource(settings.health_replay, node=NODE)
        except (SourceError, OSError) as exc:
            print(f"--health-replay: {getattr(exc, 'message', exc)}", file=sys.stderr)
            return 2
    if settings.cluster and settings.workspace_role:  # whom the RoleBindings bind
        from taugrid.errors import UsageError as AccessProblem
        from taugrid.server.cluster import workspace_access

        try:
            workspace_access(settings)
        except AccessProblem as exc:
            print(exc.message, file=sys.stderr)
            return 2
    if settings.policy_file is not None:  # a bad file: refused whole, with its line
        from taugrid.server.policy_file import policy_file_problem

        if problem := policy_file_problem(settings.policy_file):
            print(f"policy file: {problem}", file=sys.stderr)
            return 2
    from taugrid.server.tracing import tracing_problem

    if problem := tracing_problem(settings.otel_endpoint):  # the otel extra is missing
        print(problem, file=sys.stderr)
        return 2
    from taugrid.server.diskspace import check_disk_settings

    if problem := check_disk_settings(settings.min_free_disk, settings.run_disk_limit):
        print(problem, file=sys.stderr)
        return 2
    if args.shared:
        settings = dataclasses.replace(settings, shared=True)
    if args.retention:
        settings = dataclasses.replace(settings, retention_s=parse_retention(args.retention))
    if settings.oidc_issuer:
        from taugrid.errors import UsageError
        from taugrid.server.oidc import config_from

        try:
            if not settings.shared:
                raise UsageError("OIDC login needs a shared server (--shared)")
            config_from(settings)
        except UsageError as exc:
            print(exc.message, file=sys.stderr)
            return 2
    from taugrid.errors import UsageError
    from taugrid.server.client_address import parse_trusted_proxies

    try:
        parse_trusted_proxies(settings.trusted_proxies)
    except UsageError as exc:
        print(exc.message, file=sys.stderr)
        return 2
    from taugrid.server import sandboxing

    if problem := downgrade_problem(home, settings):
        print(problem, file=sys.stderr)
        return 2
    if problem := sandboxing.settings_problem(settings):
        print(problem, file=sys.stderr)
        return 2
    if problem := sandboxing.check(settings):  # before anything is published
        print(problem, file=sys.stderr)
        return 1
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    sock.listen()  # connections queue from now on: server.json may name this port at once
    # Every check passed, the socket listens and this process holds the home's lock:
    # later starts of this home (the CLI's auto-start too) declare the same GPUs.
    remember_gpus(home, args.gpus)
    remember_mode(home, settings)
    port = sock.getsockname()[1]
    app = create_app(settings, public_url=f"http://{settings.host}:{port}")
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=3,
        proxy_headers=False,  # X-Forwarded-For counts only from --trusted-proxy (the app's)
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def migrate_only(database_url: str | None, home: Path | None) -> int:
    """Migrate and exit: 0 with one line naming the database (never its password), 1 with
    one line saying why not. Several at once are safe: Alembic's upgrade runs in one
    transaction and a second finds the schema current."""
    from sqlalchemy.engine import make_url

    from taugrid.store.db import connect, default_sqlite_url

    url = database_url or os.environ.get("TAU_DATABASE_URL")
    if not url:
        resolved = (home or tau_home()).resolve()
        resolved.mkdir(mode=0o700, parents=True, exist_ok=True)
        url = default_sqlite_url(resolved)
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:
        print("--migrate-only: the database URL cannot be parsed", file=sys.stderr)
        return 1
    try:
        connect(url).dispose()
    except Exception as exc:  # unreachable, refused, a migration that failed: one line
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"--migrate-only: {shown}: {reason}", file=sys.stderr)
        return 1
    print(f"the schema of {shown} is the newest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
