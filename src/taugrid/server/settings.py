"""Server settings, read once at start-up."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

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

    @property
    def sandboxed(self) -> bool:
        """Whether workloads run in the sandbox (by the setting, or by the mode)."""
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
            "gpus": int(os.environ["TAU_LOCAL_GPUS"]) if os.environ.get("TAU_LOCAL_GPUS") else None,
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
        for key, var in OIDC_ENV.items():
            if os.environ.get(var):
                values[key] = os.environ[var]
        if "oidc_client_secret_file" in values:
            values["oidc_client_secret_file"] = Path(str(values["oidc_client_secret_file"]))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def parse_retention(text: str) -> float | None:
    """A duration such as ``30d``; ``never`` keeps files for ever."""
    return None if text.strip().lower() == "never" else parse_duration(text.strip())
