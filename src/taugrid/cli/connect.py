"""Find the server to talk to, starting the local one when none runs.

``TAU_SERVER_URL`` (and ``TAU_TOKEN``) point the CLI at any server; otherwise it uses
the local server published in ``$TAU_HOME/server.json`` and starts one if needed.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from taugrid.cli.client import Client
from taugrid.errors import AuthError, ServerUnreachable
from taugrid.home import server_info_path, server_log_path, tau_home, token_path

START_TIMEOUT_S = 30.0


def connect(*, start: bool = True) -> Client:
    url = os.environ.get("TAU_SERVER_URL")
    if url:
        return Client(url, os.environ.get("TAU_TOKEN"))
    home = tau_home()
    info = running_server(home)
    if info is None:
        if not start:
            raise ServerUnreachable("no local tau server is running (start one: tau server start)")
        info = start_server(home)
    return Client(str(info["url"]), read_token(home))


def read_token(home: Path) -> str:
    try:
        return token_path(home).read_text().strip()
    except OSError as exc:
        raise AuthError(f"cannot read the API token at {token_path(home)}: {exc}") from exc


def running_server(home: Path) -> dict[str, object] | None:
    """The published server, if its process is alive (cheap: no network round trip)."""
    try:
        info: dict[str, object] = json.loads(server_info_path(home).read_text())
        os.kill(int(str(info["pid"])), 0)
    except (OSError, ValueError, KeyError):
        return None
    return info


def start_server(home: Path, extra_args: list[str] | None = None) -> dict[str, object]:
    """Start ``python -m taugrid.server`` detached, wait until it serves, return its info."""
    import subprocess

    home.mkdir(parents=True, exist_ok=True)
    with (home / "autostart.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two CLIs starting at once start one server
        info = running_server(home)
        if info is not None:
            return info
        log = server_log_path(home)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "taugrid.server", "--home", str(home), *(extra_args or [])],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            info = running_server(home)
            if info is not None and info.get("pid") == proc.pid:
                return info
            if proc.poll() is not None:
                raise ServerUnreachable(
                    f"the local tau server failed to start (exit {proc.returncode}): "
                    f"{_last_line(log)}; see {log}"
                )
            time.sleep(0.05)
        raise ServerUnreachable(
            f"the local tau server did not start in {START_TIMEOUT_S:.0f}s; see {log}"
        )


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"
