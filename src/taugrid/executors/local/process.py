"""Server-side control of per-attempt supervisors: start, observe, cancel.

The server never owns workload processes. It starts a detached supervisor per attempt and
afterwards only reads files and sends signals, so it can be restarted (or ``kill -9``ed)
at any time without touching running work.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from taugrid.executors.local import forkserver
from taugrid.executors.local import supervisor as _supervisor
from taugrid.executors.local.files import read_json, write_json_atomic
from taugrid.executors.local.supervisor import CANCEL_FILE, PID_FILE, STATUS_FILE

SUPERVISOR_SCRIPT = Path(_supervisor.__file__).resolve()
_REAP_INTERVAL_S = 0.5
# "0": start every supervisor as a fresh interpreter, never forked (forkserver.py).
FORK_SERVER_ENV = "TAU_SUPERVISOR_FORK_SERVER"
log = logging.getLogger("taugrid.executor")

# Supervisors this process started and has not reaped yet. A kept Popen is reaped by
# polling it; never os.waitpid(-1), which would steal other subprocess users' children.
_children: dict[int, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()
_reaper: threading.Thread | None = None


def reap_supervisors() -> list[int]:
    """Reap supervisors that have exited; their pids. Also runs every 0.5 s in a thread."""
    with _children_lock:
        done = [pid for pid, proc in _children.items() if proc.poll() is not None]
        for pid in done:
            del _children[pid]
    return done


def _reap_forever() -> None:
    while True:
        time.sleep(_REAP_INTERVAL_S)
        reap_supervisors()


_fork_servers: dict[str, forkserver.Client] = {}
_fork_servers_lock = threading.Lock()


def _fork_server(python: str) -> forkserver.Client:
    with _fork_servers_lock:
        client = _fork_servers.get(python)
        if client is None:
            argv = [python, "-I", "-S", str(SUPERVISOR_SCRIPT), forkserver.FLAG, "."]
            client = _fork_servers[python] = forkserver.Client(argv)
            atexit.register(client.close)
        return client


def start_supervisor(attempt_dir: Path, python: str = sys.executable) -> int:
    """Start the supervisor of ``attempt_dir`` (holding launch.json) detached; its pid.

    Forked by this process's supervisor fork server (``forkserver``: no interpreter
    start-up, no imports per run), or where that fails (or ``TAU_SUPERVISOR_FORK_SERVER=0``)
    started as ``python -I -S supervisor.py ATTEMPT_DIR``: isolated from PYTHON* variables
    and the user's site, and no site-packages scan. Returns as soon as the process exists.
    """
    attempt_dir = Path(attempt_dir).resolve()
    if not (attempt_dir / _supervisor.LAUNCH_FILE).is_file():
        raise FileNotFoundError(f"no {_supervisor.LAUNCH_FILE} in {attempt_dir}")
    if os.environ.get(FORK_SERVER_ENV, "1") != "0":
        try:
            return _fork_server(python).spawn(str(attempt_dir))
        except forkserver.Unavailable as exc:
            if not exc.recent:
                log.warning("supervisor fork server unavailable (%s); starting them directly", exc)
    return _start_interpreter(attempt_dir, python)


def _start_interpreter(attempt_dir: Path, python: str) -> int:
    global _reaper
    proc = subprocess.Popen(
        [python, "-I", "-S", str(SUPERVISOR_SCRIPT), str(attempt_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,  # no signal aimed at the server's group reaches it
    )
    with _children_lock:
        _children[proc.pid] = proc
        if _reaper is None:
            _reaper = threading.Thread(target=_reap_forever, name="tau-reaper", daemon=True)
            _reaper.start()
    return proc.pid


def read_status(attempt_dir: Path) -> dict[str, Any] | None:
    """The supervisor's status.json; None before it exists (or if it is unreadable)."""
    try:
        data = read_json(Path(attempt_dir) / STATUS_FILE)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_supervisor_pid(attempt_dir: Path) -> int | None:
    """The pid in supervisor.pid, written once the supervisor can take a SIGTERM."""
    try:
        text = (Path(attempt_dir) / PID_FILE).read_text(encoding="ascii")
        return int(text.strip())
    except (OSError, ValueError):
        return None


def _proc_stat_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[0].decode("ascii", "replace") if fields else None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process; a zombie (exited, not reaped) counts as dead."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    state = _proc_stat_state(pid)
    if state is None:
        # No /proc (not Linux) means kill() is all we know; on Linux it just died.
        return not os.path.isdir("/proc/self")
    return state not in ("Z", "X")


def is_supervisor_of(pid: int, attempt_dir: Path) -> bool:
    """Whether ``pid`` is alive and is the supervisor of ``attempt_dir``, not a recycled pid.

    Its last argument, resolved against its working directory, names the attempt: the
    path itself for a supervisor started as ``supervisor.py ATTEMPT_DIR``, ``.`` for one
    forked by the fork server, which works in its attempt directory (forkserver.py)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        proc_cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return True  # cannot look closer (not Linux, or not ours to inspect)
    args = [a for a in args if a]
    if not args:
        return False
    target = os.path.realpath(os.path.join(proc_cwd, os.fsdecode(args[-1])))
    return target == os.path.realpath(attempt_dir)


def supervisor_running(attempt_dir: Path) -> bool:
    """Whether the supervisor of ``attempt_dir`` is alive (False before it wrote its pid)."""
    pid = read_supervisor_pid(attempt_dir)
    return pid is not None and is_supervisor_of(pid, attempt_dir)


def request_cancel(attempt_dir: Path, reason: str = "cancel") -> bool:
    """Ask the attempt's supervisor to stop the workload; False if it is already gone.

    Writes ``cancel`` first, then SIGTERMs the supervisor. A supervisor still starting
    (no supervisor.pid yet) checks the file before it starts the workload, so a cancel
    can never be lost; True is returned for that case too.
    """
    attempt_dir = Path(attempt_dir)
    status = read_status(attempt_dir)
    if status is not None and status.get("phase") == "exited":
        return False
    # The reason rides in the file: the supervisor reports it back with the exit.
    write_json_atomic(attempt_dir / CANCEL_FILE, {"requested_at": time.time(), "reason": reason})
    pid = read_supervisor_pid(attempt_dir)
    if pid is None:
        return True
    if not is_supervisor_of(pid, attempt_dir):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True
