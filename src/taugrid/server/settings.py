"""Server settings, read once at start-up, and the ones a server remembers for the next.

A declared GPU count (``--gpus N``) is remembered in ``$TAU_HOME/server-settings.json``
(0600) and applies to every later start of that home, the CLI's auto-start included,
until ``--gpus M`` or ``--gpus auto`` (detect through NVML again) changes it;
``TAU_LOCAL_GPUS`` overrides it for one start without changing it. Otherwise a server
auto-started after ``tau server stop`` or a crash would come back without the GPUs that
its re-adopted runs hold.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taugrid.home import tau_home
from taugrid.spec import parse_duration
from taugrid.store.db import default_sqlite_url

DEFAULT_RETENTION_S = 30 * 86400.0
OIDC_ENV = {
    "oidc_issuer": "TAU_OIDC_ISSUER",
    "oidc_client_id": "TAU_OIDC_CLIENT_ID",
    "oidc_client_secret_file": "TAU_OIDC_CLIENT_SECRET_FILE",
    "oidc_user_claim": "TAU_OIDC_USER_CLAIM",
    "oidc_groups_claim": "TAU_OIDC_GROUPS_CLAIM",
}

SETTINGS_FILE = "server-settings.json"
AUTO = "auto"  # --gpus auto / TAU_LOCAL_GPUS=auto: detect the GPUs, remember no count

CLUSTER_ENV = {
    "executor": "TAU_EXECUTOR",
    "kube_context": "TAU_KUBE_CONTEXT",
    "namespace_prefix": "TAU_NAMESPACE_PREFIX",
    "pod_server_url": "TAU_POD_SERVER_URL",
    "helper_image": "TAU_HELPER_IMAGE",
    "kueue_positions_s": "TAU_KUEUE_POSITIONS_S",
}
EXECUTORS = ("local", "kubernetes")
HEALTH_ENV = {
    "health": "TAU_HEALTH",
    "health_kmsg": "TAU_HEALTH_KMSG",
    "health_replay": "TAU_HEALTH_REPLAY",
    "health_breaker": "TAU_HEALTH_BREAKER",
}
HEALTH_MODES = ("on", "shadow", "off")
METRICS_ENV = {
    "metrics": "TAU_METRICS",
    "metrics_port": "TAU_METRICS_PORT",
    "metrics_token_file": "TAU_METRICS_TOKEN_FILE",
    "log_format": "TAU_LOG_FORMAT",
    "prometheus_url": "TAU_PROMETHEUS_URL",
}
POLICY_ENV = {"policy_file": "TAU_POLICY_FILE"}  # the chart's policy, applied at start
METRICS_MODES = ("on", "off")
LOG_FORMATS = ("text", "json")
ISOLATION_ENV = {
    "isolation": "TAU_ISOLATION",
    "bwrap": "TAU_BWRAP",
    "sandbox_binds": "TAU_SANDBOX_BINDS",  # colon-separated, like PATH
    "workload_uids": "TAU_WORKLOAD_UIDS",
}


@dataclass(frozen=True)
class ServerSettings:
    home: Path
    db_url: str
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port and publish it in server.json
    gpus: int | None = None  # declared GPUs; None: detect them through NVML
    shared: bool = False  # a server for several people: API tokens, bootstrap admin
    poll_interval_s: float = 0.5
    # Logs, outputs and checkpoints of finished runs are removed after this long (records
    # stay); None keeps them for ever.
    retention_s: float | None = DEFAULT_RETENTION_S
    # OIDC login (docs/access.md); None: off. The client secret is read from a file.
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret_file: Path | None = None
    oidc_user_claim: str = "email"
    oidc_groups_claim: str = "groups"
    # How workloads are isolated (docs/isolation.md): "none" runs them as the server's
    # user, "sandbox" in bubblewrap seeing only their own run's files. None: "sandbox"
    # for a shared server (which refuses "none"), "none" for the local one.
    isolation: str | None = None
    bwrap: str = "bwrap"  # the bubblewrap binary (a name on PATH or a path)
    sandbox_binds: tuple[str, ...] = ()  # more paths every sandbox shows, read-only
    workload_uids: str = "2000000-2999999"  # one uid per run from here (server is root)
    # Reverse proxies whose X-Forwarded-For names the client (addresses or CIDRs, as
    # given; parsed by server/client_address.py). Empty: the TCP peer is the client.
    trusted_proxies: tuple[str, ...] = ()
    # Free space kept on TAU_HOME's disk: below it new work is refused (DiskFull); a
    # quantity ("256Mi") or a share ("1%"), see server/diskspace.py.
    min_free_disk: str = "256Mi"
    # Default per-run disk limit (resources.disk overrides it); None: no limit.
    run_disk_limit: str | None = None
    # Where runs run (docs/kubernetes.md): "local" processes, or "kubernetes" (Jobs,
    # Indexed Jobs, RayJobs admitted by Kueue). The cluster is found like kubectl does
    # (--kubeconfig, else KUBECONFIG, else ~/.kube/config, else in-cluster credentials).
    executor: str = "local"
    kubeconfig: Path | None = None
    kube_context: str | None = None
    namespace_prefix: str = ""  # a workspace W's runs go to namespace PREFIX + W
    pod_server_url: str | None = None  # how pods reach this server (code snapshots)
    helper_image: str | None = None  # the pods' code-fetching init container's image
    kueue_positions_s: float = 5.0  # how often Kueue's visibility API is asked
    # GPU health (docs/gpu-health.md): "on" acts on faults, "shadow" records what it would
    # do, "off" watches nothing. Sources beyond injection: the kernel log (a path; default
    # /dev/kmsg where real GPUs are probed) and a replayed JSONL file (a drill).
    health: str = "on"
    health_kmsg: str | None = None
    health_replay: Path | None = None
    # The circuit breaker: at most this share of the GPUs taken out within this window
    # ("SHARE/WINDOW"); beyond it decisions are recorded, not acted on.
    health_breaker: str = "20%/10m"
    # Prometheus metrics (docs/observability.md): "on" serves /metrics, "off" keeps no
    # instruments at all (the figure of what they cost is measured against it). A local
    # server answers /metrics on its loopback URL without a token; a shared one only with
    # the scrape token held in metrics_token_file, or on metrics_port (no auth there: a
    # port the platform exposes to Prometheus alone).
    metrics: str = "on"
    metrics_port: int | None = None
    metrics_token_file: Path | None = None
    log_format: str = "text"  # the server's own log lines: "text" or "json" (one object each)
    # A cluster's Prometheus, where the DCGM exporter's series give the runs' GPU use
    # (docs/observability.md); None: a cluster's runs show none.
    prometheus_url: str | None = None
    # A policy.yaml applied at start when it differs from the policy in force (the Helm
    # chart mounts it; server/policy_file.py); None: none.
    policy_file: Path | None = None
    # Workspace-scoped RBAC (the Helm chart's): the ClusterRole each workspace namespace
    # binds to the server's ServiceAccount ("namespace/name"; None: the pod's own) by a
    # RoleBinding of the policy's (policy/workspace_access.py). None: no RoleBindings.
    workspace_role: str | None = None
    service_account: str | None = None
    # OpenTelemetry tracing of the submit -> running path (server/tracing.py): the full
    # OTLP/HTTP traces URL spans go to; None: off (see otel_endpoint below).
    otel_endpoint: str | None = None

    @property
    def sandboxed(self) -> bool:
        """Whether workloads run in the sandbox (by the setting, or by the mode). Never on
        a cluster: workloads run in pods there, not as the server's processes."""
        if self.cluster:
            return False
        return (self.isolation or ("sandbox" if self.shared else "none")) == "sandbox"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def snapshots_dir(self) -> Path:
        return self.home / "snapshots"

    @classmethod
    def from_env(cls, home: Path | None = None, **overrides: object) -> ServerSettings:
        home = home or tau_home()
        values: dict[str, object] = {
            "home": home,
            "db_url": os.environ.get("TAU_DATABASE_URL") or default_sqlite_url(home),
            "gpus": parse_gpus(os.environ.get("TAU_LOCAL_GPUS") or AUTO, "TAU_LOCAL_GPUS"),
        }
        if os.environ.get("TAU_RETENTION"):
            values["retention_s"] = parse_retention(os.environ["TAU_RETENTION"])
        for key, var in (
            ("min_free_disk", "TAU_MIN_FREE_DISK"),
            ("run_disk_limit", "TAU_RUN_DISK_LIMIT"),
        ):
            if os.environ.get(var):
                values[key] = os.environ[var]
        if os.environ.get("TAU_TRUSTED_PROXIES"):
            values["trusted_proxies"] = (os.environ["TAU_TRUSTED_PROXIES"],)
        for key, var in ISOLATION_ENV.items():
            if os.environ.get(var):
                values[key] = os.environ[var]
        if "sandbox_binds" in values:
            values["sandbox_binds"] = tuple(p for p in str(values["sandbox_binds"]).split(":") if p)
        for key, var in CLUSTER_ENV.items():
            if os.environ.get(var):
                values[key] = os.environ[var]
        for key, var in OIDC_ENV.items():
            if os.environ.get(var):
                values[key] = os.environ[var]
        for key, var in (*HEALTH_ENV.items(), *METRICS_ENV.items(), *POLICY_ENV.items()):
            if os.environ.get(var):
                values[key] = os.environ[var]
        if "oidc_client_secret_file" in values:
            values["oidc_client_secret_file"] = Path(str(values["oidc_client_secret_file"]))
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "kueue_positions_s" in values:
            values["kueue_positions_s"] = float(str(values["kueue_positions_s"]))
        if values.get("kubeconfig") is not None:
            values["kubeconfig"] = Path(str(values["kubeconfig"]))
        if values.get("health_replay") is not None:
            values["health_replay"] = Path(str(values["health_replay"]))
        if values.get("policy_file") is not None:
            values["policy_file"] = Path(str(values["policy_file"]))
        _access_values(values)
        values["otel_endpoint"] = otel_endpoint(values.get("otel_endpoint"))
        if values.get("health", "on") not in HEALTH_MODES:
            raise ValueError(
                f"unknown GPU health mode {values['health']!r} (TAU_HEALTH or --health): "
                f"use {', '.join(HEALTH_MODES)}"
            )
        _metrics_values(values)
        if "health_breaker" in values:
            parse_breaker(str(values["health_breaker"]))  # refused here, in words
        if values.get("executor", "local") not in EXECUTORS:
            raise ValueError(
                f"unknown executor {values['executor']!r} (TAU_EXECUTOR or --executor): "
                f"use {' or '.join(EXECUTORS)}"
            )
        return cls(**values)  # type: ignore[arg-type]

    @property
    def cluster(self) -> bool:
        return self.executor == "kubernetes"


def _access_values(values: dict[str, object]) -> None:
    """The workspace ClusterRole and the ServiceAccount from the environment (the chart
    sets TAU_WORKSPACE_CLUSTERROLE, TAU_SERVICE_ACCOUNT as a name and
    TAU_SERVICE_ACCOUNT_NAMESPACE; TAU_WORKSPACE_ROLE and ``namespace/name`` work too)."""
    env = os.environ
    role = env.get("TAU_WORKSPACE_CLUSTERROLE") or env.get("TAU_WORKSPACE_ROLE")
    if role and values.get("workspace_role") is None:
        values["workspace_role"] = role
    account = values.get("service_account") or env.get("TAU_SERVICE_ACCOUNT")
    namespace = env.get("TAU_SERVICE_ACCOUNT_NAMESPACE")
    if account and "/" not in str(account) and namespace:
        account = f"{namespace}/{account}"
    if account:
        values["service_account"] = str(account)


def _metrics_values(values: dict[str, object]) -> None:
    """The metrics settings checked and typed in place; ValueError naming the setting."""
    if values.get("metrics", "on") not in METRICS_MODES:
        raise ValueError(f"TAU_METRICS is on or off, not {values['metrics']!r}")
    if values.get("log_format", "text") not in LOG_FORMATS:
        raise ValueError(
            f"unknown log format {values['log_format']!r} (TAU_LOG_FORMAT or --log-format): "
            f"use {' or '.join(LOG_FORMATS)}"
        )
    if values.get("metrics_port") is not None:
        text = str(values["metrics_port"])
        if not (text.isascii() and text.isdigit() and 0 < int(text) < 65536):
            raise ValueError(f"the metrics port (TAU_METRICS_PORT) is 1-65535, not {text!r}")
        values["metrics_port"] = int(text)
    if values.get("metrics_token_file") is not None:
        values["metrics_token_file"] = Path(str(values["metrics_token_file"]))


# Where tracing's endpoint is read, in order, and whether it is a base URL.
OTEL_ENDPOINTS = (
    ("--otel-endpoint", True),
    ("TAU_OTEL_ENDPOINT", True),
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", False),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", True),
)


def otel_endpoint(flag: object = None) -> str | None:
    """Where spans go (the full OTLP/HTTP traces URL), or None: tracing off. ``--otel-endpoint``
    or ``TAU_OTEL_ENDPOINT``, else the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (a
    full URL), else ``OTEL_EXPORTER_OTLP_ENDPOINT``; the base URLs get ``/v1/traces``.
    ``OTEL_SDK_DISABLED=true`` turns it off. ValueError naming the setting."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    for name, base in OTEL_ENDPOINTS:
        url = str((flag if name == "--otel-endpoint" else os.environ.get(name)) or "").strip()
        if not url:
            continue
        if not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
            raise ValueError(f"{name} is an http:// or https:// URL, not {url!r}")
        if base and not url.rstrip("/").endswith("/v1/traces"):
            url = url.rstrip("/") + "/v1/traces"
        return url
    return None


def parse_breaker(text: str) -> tuple[float, float]:
    """``"20%/10m"`` -> (0.2, 600.0): the share of GPUs and the window of the breaker."""
    share_text, sep, window_text = text.partition("/")
    try:
        if not sep or not share_text.endswith("%"):
            raise ValueError("give SHARE%/WINDOW")
        share = float(share_text[:-1]) / 100
        window = parse_duration(window_text)
        if not 0 < share <= 1 or window <= 0:
            raise ValueError("the share is in (0%, 100%] and the window over 0")
    except ValueError as exc:
        raise ValueError(
            f"GPU health breaker {text!r} (TAU_HEALTH_BREAKER): {exc}; e.g. 20%/10m"
        ) from None
    return share, window


def parse_retention(text: str) -> float | None:
    """A duration such as ``30d``; ``never`` keeps files for ever."""
    return None if text.strip().lower() == "never" else parse_duration(text.strip())


def parse_gpus(text: str, what: str = "--gpus") -> int | None:
    """A GPU count (``4``) or ``auto`` (None: detect them); ValueError naming ``what``."""
    value = text.strip().lower()
    if value == AUTO:
        return None
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"{what} must be a number of GPUs (0 or more) or auto")
    return int(value)


def declared_gpus(home: Path, flag: str | None) -> int | None:
    """The GPUs this start declares (None: detect them): ``--gpus N`` or ``--gpus auto``,
    else ``TAU_LOCAL_GPUS`` (this start only), else the remembered count, else
    detection."""
    if flag is not None:
        return parse_gpus(flag)
    if os.environ.get("TAU_LOCAL_GPUS"):
        return parse_gpus(os.environ["TAU_LOCAL_GPUS"], "TAU_LOCAL_GPUS")
    remembered = read_remembered(home).get("gpus")
    return remembered if isinstance(remembered, int) and remembered >= 0 else None


def remember_gpus(home: Path, flag: str | None) -> None:
    """After a successful start: ``--gpus N`` is remembered, ``--gpus auto`` forgotten;
    no flag changes nothing."""
    if flag is not None:
        _write_remembered(home, {"gpus": parse_gpus(flag)})


def downgrade_problem(home: Path, settings: ServerSettings) -> str | None:
    """Why this start may not serve ``home``, or None. A home once served by a shared (or
    sandboxing) server keeps that: its queued runs were submitted by other people to run
    in a sandbox, and a plain local server (the CLI's auto-start, say) would run them as
    its own user. Deleting server-settings.json is the deliberate way back."""
    was = read_remembered(home)
    if was.get("shared") and not settings.shared:
        return (
            f"{home} is the home of a shared server (its runs belong to other people and "
            "run sandboxed); start it with: tau server start --shared (or use another "
            f"TAU_HOME; delete {home / SETTINGS_FILE} to make it a local home again)"
        )
    if was.get("executor") == "kubernetes" and not settings.cluster:
        return (
            f"{home} is the home of a cluster server (its runs are Kubernetes Jobs); start "
            "it with: tau server start --executor kubernetes (or set TAU_EXECUTOR=kubernetes; "
            f"delete {home / SETTINGS_FILE} to make it a local home again)"
        )
    if was.get("sandboxed") and not settings.sandboxed:
        return (
            f"{home} was served with --isolation sandbox; start it with --isolation sandbox "
            f"(or delete {home / SETTINGS_FILE} to run its workloads unsandboxed)"
        )
    return None


def remember_mode(home: Path, settings: ServerSettings) -> None:
    """After a successful start: a shared or sandboxing home is remembered as one (never
    downgraded here: see :func:`downgrade_problem`)."""
    changes: dict[str, Any] = {"shared": True if settings.shared else None}
    changes["sandboxed"] = True if settings.sandboxed else None
    changes["executor"] = settings.executor if settings.cluster else None
    if any(changes.values()):
        _write_remembered(home, changes)


def read_remembered(home: Path) -> dict[str, Any]:
    """The remembered settings; {} when none (or the file is unreadable: a hand edit
    gone wrong must not stop the server, which then detects)."""
    try:
        data = json.loads((home / SETTINGS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_remembered(home: Path, changes: dict[str, Any]) -> None:
    data = {k: v for k, v in {**read_remembered(home), **changes}.items() if v is not None}
    path = home / SETTINGS_FILE
    tmp = path.with_name(f".{SETTINGS_FILE}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def published_facts(settings: ServerSettings, gpus: int) -> dict[str, Any]:
    """What ``server.json`` tells the CLI besides url and pid (``tau server status``,
    and ``tau server start`` against a running server): no secret (the database URL
    without its password), and the file is the owner's alone (0600 in TAU_HOME)."""
    from sqlalchemy.engine import make_url

    try:
        database = make_url(settings.db_url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is shown as nothing, never raw
        database = "(unparsable URL)"
    return {
        "gpus": gpus,
        "gpus_declared": settings.gpus is not None,
        "isolation": "sandbox" if settings.sandboxed else "none",
        "shared": settings.shared,
        "database": database,
    }
