"""Find the server to talk to, starting the local one when none runs.

The context in force (:mod:`taugrid.cli.contexts`: ``TAU_SERVER``/``TAU_TOKEN``, then
``tau --context``, ``TAU_CONTEXT``, the config's current context) names a server and its
token; the context ``local``, the default, is the server published in
``$TAU_HOME/server.json``, started if needed.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from taugrid.cli import contexts
from taugrid.cli.client import Client
from taugrid.errors import AuthError, ServerUnreachable
from taugrid.home import server_info_path, server_log_path, tau_home, token_path

START_TIMEOUT_S = 30.0


def connect(*, start: bool = True) -> Client:
    ctx = selected().context
    home = tau_home()
    private_home(home)  # the snapshot cache lives there whichever server is used
    if ctx.server is not None:
        return Client(ctx.server, ctx.token)
    info = running_server(home)
    if info is None:
        if not start:
            raise ServerUnreachable("no local tau server is running (start one: tau server start)")
        info = start_server(home)
    return Client(str(info["url"]), read_token(home))


def selected() -> contexts.Selection:
    """The context this invocation uses (honours the global ``--context NAME``)."""
    return contexts.select(context_option())


def default_workspace() -> str | None:
    """The selected context's ``workspace``: what ``--workspace`` defaults to."""
    return selected().context.workspace


def context_option() -> str | None:
    """``tau --context NAME`` of the running click command, if any."""
    import click  # loaded already whenever a command runs

    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    name = obj.get("context") if isinstance(obj, dict) else None
    return name if isinstance(name, str) else None


def private_home(home: Path) -> None:
    """TAU_HOME and the CLI's snapshot cache in it, readable by this user alone (0700;
    the server checks the rest when it starts). A few stat calls when they exist."""
    for path in (home, home / "cache", home / "cache" / "snapshots"):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            try:
                st = path.stat()
                if st.st_mode & 0o077 and st.st_uid == os.getuid():
                    path.chmod(st.st_mode & 0o7700)
            except OSError:
                pass
        except OSError:
            return  # read-only or missing parent: the command fails later, with a message


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

    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock_fd = os.open(home / "autostart.lock", os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(lock_fd, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two CLIs starting at once start one server
        info = running_server(home)
        if info is not None:
            return info
        log = server_log_path(home)
        log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(log_fd, "ab") as out:
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
