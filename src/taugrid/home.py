"""Where TauGrid keeps local state. Stdlib only: the CLI's start-up path imports this."""

from __future__ import annotations

import os
from pathlib import Path


def tau_home() -> Path:
    env = os.environ.get("TAU_HOME")
    if env:
        return Path(env).expanduser().resolve()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "tau"


def server_info_path(home: Path) -> Path:
    """JSON written by a running server: url, pid, version. Removed on clean stop."""
    return home / "server.json"


def token_path(home: Path) -> Path:
    return home / "token"


def server_log_path(home: Path) -> Path:
    return home / "server.log"
