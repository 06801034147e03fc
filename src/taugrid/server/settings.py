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
