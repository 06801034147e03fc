"""Server settings, read once at start-up."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from taugrid.home import tau_home
from taugrid.store.db import default_sqlite_url


@dataclass(frozen=True)
class ServerSettings:
    home: Path
    db_url: str
    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port and publish it in server.json
    gpus: int | None = None  # declared GPUs; None: detect them through NVML
    poll_interval_s: float = 0.5

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
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
