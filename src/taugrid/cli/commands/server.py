"""Start, stop or inspect the local server."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import click
from click.core import ParameterSource

from taugrid.cli.client import Client
from taugrid.cli.connect import running_server, start_server
from taugrid.cli.output import emit_json, output_option
from taugrid.errors import Conflict, ServerUnreachable, UsageError
from taugrid.home import tau_home
from taugrid.net import is_loopback_host

NOT_RUNNING_EXIT = 3  # `tau server status` with no server, as service managers' status


class GpuCount(click.ParamType[str]):
    """A number of GPUs, or ``auto`` (detect them through NVML)."""

    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip().lower()
        if text == "auto":
            return text
        if text.isascii() and text.isdigit():
            return str(int(text))
        self.fail("must be a number of GPUs (0 or more) or auto", param, ctx)


@click.group(name="server", help=__doc__)
def command() -> None:
    pass


@command.command(name="start", help="Start the local server (the CLI also does this itself).")
@click.option(
    "--gpus",
    type=GpuCount(),
    help="GPUs to offer to runs; remembered for every later start of this TAU_HOME (the "
    "CLI's auto-start too) until changed. auto: detect them (NVML).",
)
@click.option("--database-url", help="SQLAlchemy URL (default: SQLite in TAU_HOME).")
@click.option(
    "--retention",
    help="Keep finished runs' logs, outputs and checkpoints this long (e.g. 30d, or never; "
    "default 30d). Records are kept for good.",
)
@click.option(
    "--min-free-disk",
    metavar="QUANTITY|PCT",
    help="Refuse new runs while TAU_HOME's disk has less free, e.g. 256Mi or 1% "
    "(default 256Mi; 0: off).",
)
@click.option(
    "--run-disk-limit",
    metavar="QUANTITY",
    help="Disk space a run's files may take unless its resources.disk says, e.g. 20Gi "
    "(default: no limit).",
)
@click.option(
    "--shared",
    is_flag=True,
    help="Serve several people: API tokens and workspace roles; prints a bootstrap admin "
    "token once (kept in TAU_HOME/admin-token, mode 0600).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address (--shared only).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Port (default: random).")
@click.option("--oidc-issuer", metavar="URL", help="Log in through this OIDC provider (--shared).")
@click.option("--oidc-client-id", metavar="ID", help="The OIDC client id.")
@click.option(
    "--oidc-client-secret-file",
    type=click.Path(exists=True, dir_okay=False),
    help="File holding the OIDC client secret (never on the command line).",
)
@click.option("--oidc-user-claim", metavar="CLAIM", help="Claim naming the user (default email).")
@click.option("--oidc-groups-claim", metavar="CLAIM", help="Claim listing groups (default groups).")
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="CIDR",
    help="A reverse proxy whose X-Forwarded-For names the client (repeatable).",
)
@click.option(
    "--isolation",
    type=click.Choice(["none", "sandbox"]),
    help="Run workloads as your user (none) or each in a sandbox that sees only its own "
    "run (sandbox). Default: sandbox with --shared (which refuses none), else none.",
)
@click.option("--bwrap", metavar="PATH", help="The bubblewrap binary (default: bwrap on PATH).")
@click.option(
    "--sandbox-bind",
    "sandbox_binds",
    multiple=True,
    metavar="PATH",
    help="Show PATH read-only in every sandbox (repeatable).",
)
@click.option(
    "--workload-uids",
    metavar="FIRST-LAST",
    help="Uids for sandboxed runs when the server runs as root, one per run "
    "(default 2000000-2999999).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "kubernetes"]),
    help="Where runs run: local processes (default), or Kubernetes Jobs admitted by Kueue.",
)
@click.option("--kubeconfig", metavar="FILE", help="The cluster's kubeconfig (default KUBECONFIG).")
@click.option("--context", "kube_context", metavar="NAME", help="The kubeconfig context to use.")
@click.option(
    "--namespace-prefix", metavar="PREFIX", help="Workspace W's runs go to namespace PREFIX+W."
)
@click.option("--pod-server-url", metavar="URL", help="How pods reach this server (code).")
@click.option(
    "--health",
    type=click.Choice(["on", "shadow", "off"]),
    help="GPU health: act on faults (on, default), record what it would do (shadow), or off.",
)
@click.option(
    "--health-replay",
    metavar="FILE",
    help="Replay recorded GPU-health observations (JSONL) through the monitor: a drill.",
)
@click.option(
    "--health-breaker",
    metavar="SHARE%/WINDOW",
    help="At most this share of GPUs taken out of service in the window (default 20%/10m).",
)
def start(
    gpus: str | None,
    database_url: str | None,
    retention: str | None,
    min_free_disk: str | None,
    run_disk_limit: str | None,
    shared: bool,
    host: str,
    port: int,
    oidc_issuer: str | None,
    oidc_client_id: str | None,
    oidc_client_secret_file: str | None,
    oidc_user_claim: str | None,
    oidc_groups_claim: str | None,
    trusted_proxies: tuple[str, ...],
    isolation: str | None,
    bwrap: str | None,
    sandbox_binds: tuple[str, ...],
    workload_uids: str | None,
    executor: str | None,
    kubeconfig: str | None,
    kube_context: str | None,
    namespace_prefix: str | None,
    pod_server_url: str | None,
    health: str | None,
    health_replay: str | None,
    health_breaker: str | None,
) -> None:
    home = tau_home()
    info = running_server(home)
    if info is not None:
        already_running(click.get_current_context(), info, gpus)
        return
    args = []
    if gpus is not None:
        args += ["--gpus", gpus]
    if database_url:
        args += ["--database-url", database_url]
    if retention:
        args += ["--retention", retention]
    for flag, value in (("--min-free-disk", min_free_disk), ("--run-disk-limit", run_disk_limit)):
        if value:
            args += [flag, value]
    if not shared and not is_loopback_host(host):
        raise UsageError(f"a local server binds to loopback only; --host {host} needs --shared")
    if shared:
        args += ["--shared", "--host", host, "--port", str(port)]
    elif port:
        args += ["--port", str(port)]
    if oidc_client_secret_file:
        oidc_client_secret_file = os.path.abspath(oidc_client_secret_file)
    for flag, value in (
        ("--oidc-issuer", oidc_issuer),
        ("--oidc-client-id", oidc_client_id),
        ("--oidc-client-secret-file", oidc_client_secret_file),
        ("--oidc-user-claim", oidc_user_claim),
        ("--oidc-groups-claim", oidc_groups_claim),
    ):
        if value:
            args += [flag, value]
    for proxy in trusted_proxies:
        args += ["--trusted-proxy", proxy]
    if shared and isolation == "none":
        raise UsageError(
            "a shared server must isolate workloads (--isolation sandbox): with --isolation "
            "none every researcher's job could read TAU_HOME, the server's tokens and every "
            "other run"
        )
    if bwrap:
        bwrap = os.path.abspath(bwrap) if "/" in bwrap else bwrap
    for flag, value in (("--isolation", isolation), ("--bwrap", bwrap)):
        if value:
            args += [flag, value]
    for path in sandbox_binds:
        args += ["--sandbox-bind", os.path.abspath(path)]
    if workload_uids:
        args += ["--workload-uids", workload_uids]
    if kubeconfig:
        kubeconfig = os.path.abspath(kubeconfig)
    for flag, value in (
        ("--executor", executor),
        ("--kubeconfig", kubeconfig),
        ("--context", kube_context),
        ("--namespace-prefix", namespace_prefix),
        ("--pod-server-url", pod_server_url),
        ("--health", health),
        ("--health-replay", os.path.abspath(health_replay) if health_replay else None),
        ("--health-breaker", health_breaker),
    ):
        if value:
            args += [flag, value]
    bootstrap = home / "admin-token"
    existed = bootstrap.exists()
    info = start_server(home, args)
    click.echo(f"tau server running at {info['url']} (pid {info['pid']})")
    if shared and not existed and bootstrap.exists():
        click.echo(f"bootstrap admin token (shown once; also in {bootstrap}, mode 0600):")
        click.echo(bootstrap.read_text().strip())


def gpus_text(info: dict[str, Any], *, unit: bool = True) -> str:
    """``2 GPUs (declared)`` (``2 (declared)`` without the unit), from what the server
    published in server.json."""
    count = info.get("gpus")
    if not isinstance(count, int):
        return "unknown GPUs (a server of an older version)" if unit else "unknown"
    how = "declared" if info.get("gpus_declared") else "detected"
    noun = f" GPU{'' if count == 1 else 's'}" if unit else ""
    return f"{count}{noun} ({how})"


def already_running(ctx: click.Context, info: dict[str, Any], gpus: str | None) -> None:
    """``tau server start`` against a running server: its settings cannot change while it
    runs, so asking for other ones is a conflict (exit 7) that says how; asking for what
    it already has is fine."""
    pid, url = info["pid"], info["url"]
    stop_first = "stop it first (its runs keep running): tau server stop, then tau server start"
    if gpus is not None:
        count, declared = info.get("gpus"), bool(info.get("gpus_declared"))
        same = (not declared) if gpus == "auto" else (isinstance(count, int) and str(count) == gpus)
        if not same:
            raise Conflict(
                f"the tau server already runs with {gpus_text(info)} (pid {pid}); to offer "
                f"--gpus {gpus}, {stop_first} --gpus {gpus}"
            )
    given = [
        "--" + name.replace("_", "-")
        for name in ctx.params
        if name != "gpus" and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    ]
    if given:
        raise Conflict(
            f"the tau server already runs (pid {pid}) and {', '.join(given)} cannot change "
            f"while it does; {stop_first} with them"
        )
    click.echo(f"tau server already running at {url} with {gpus_text(info)} (pid {pid})")


@command.command(name="stop", help="Stop the local server; running runs keep running.")
@click.option("--timeout", type=float, default=15.0, show_default=True)
def stop(timeout: float) -> None:
    home = tau_home()
    info = running_server(home)
    if info is None:
        click.echo("tau server is not running")
        return
    pid = int(str(info["pid"]))
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            click.echo(f"tau server stopped (pid {pid})")
            return
        time.sleep(0.05)
    raise ServerUnreachable(f"tau server (pid {pid}) did not stop within {timeout:.0f}s")


@command.command(
    name="status",
    help="Show whether the local server runs, where, and with what: GPUs, isolation, "
    f"database. Exits {NOT_RUNNING_EXIT} when no server runs.",
)
@output_option
@click.pass_context
def status(ctx: click.Context, output: str) -> None:
    home = tau_home()
    info = running_server(home)
    data: dict[str, object] = {"running": False, "home": str(home)}
    if info is not None:
        health = Client(str(info["url"]), None).health()
        data.update(
            running=True,
            url=info["url"],
            pid=info["pid"],
            version=health["version"],
            runs=health.get("runs"),
            gpus=info.get("gpus"),
            gpus_declared=info.get("gpus_declared"),
            isolation=info.get("isolation"),
            shared=info.get("shared"),
            database=info.get("database"),
        )
    if output == "json":
        emit_json(data)
    elif info is None:
        click.echo(f"tau server is not running (home {home})")
    else:
        click.echo(
            f"tau server running at {data['url']} (pid {data['pid']}, version "
            f"{data['version']}, home {home})"
        )
        for label, value in (
            ("GPUs", gpus_text(info, unit=False)),
            ("isolation", data["isolation"] or "unknown"),
            ("mode", "shared" if data["shared"] else "local"),
            ("database", data["database"] or "unknown"),
            ("runs", data["runs"]),
        ):
            click.echo(f"  {label + ':':<11}{value}")
    if info is None:
        ctx.exit(NOT_RUNNING_EXIT)
