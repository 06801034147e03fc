"""The process tree of one workload, seen from its supervisor. Stdlib only.

The workload runs in its own process group; what leaves the group (torchrun starts every
worker in a session of its own) is still below the supervisor, which makes itself a child
subreaper so orphans are re-parented to it rather than to init. These functions find,
signal and reap that whole tree through ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any


def stat_fields(pid: str) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state first)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].decode("ascii", "replace").split()


def group_has_live_members(pgid: int) -> bool:
    """Whether any non-zombie process is still in the process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True  # cannot tell zombies apart: callers fall back to their deadline
    # killpg(0) also succeeds for zombies (our unreaped main process, orphans init has not
    # reaped yet), so look at the state of each member.
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = stat_fields(name)
            if fields and len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in "ZX":
                return True
    return False


def killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_libc: Any = None


def _prctl() -> Any:
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc.prctl


def become_subreaper() -> str | None:
    """Orphans of the workload become our children instead of init's, so a process that
    left the workload's group (torchrun starts every worker in its own session) is still
    found, stopped and reaped with the run. Linux only; elsewhere the group is all.
    Returns why it could not, or None."""
    try:
        _prctl()(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError) as exc:
        return f"cannot become a child subreaper: {exc}"
    return None


def die_with_us() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when this process dies.

    The workload's main process then cannot outlive a supervisor killed with ``kill -9``
    (its grandchildren can, in sessions of their own: the server finds and stops those,
    see ``orphans``). The setting survives exec, not a change of uid (a sandbox that
    drops privileges has its own tie to its parent, ``bwrap --die-with-parent``).
    The supervisor is single-threaded, which ``preexec_fn`` needs. None off Linux.
    """
    try:
        prctl = _prctl()
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # we died before the setting took: follow at once
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def is_descendant(pid: int, of: int, pgid: int | None = None) -> bool:
    """Whether ``pid`` (alive or a zombie) is below ``of``, or in group/session ``pgid``."""
    seen = 0
    current = str(pid)
    while seen < 64:
        fields = stat_fields(current)
        if not fields or len(fields) < 4:
            return False
        if pgid is not None and str(pgid) in (fields[2], fields[3]):
            return True
        parent = fields[1]
        if parent == str(of):
            return True
        if parent in ("0", "1", current):
            return False
        current, seen = parent, seen + 1
    return False


def descendants() -> list[tuple[int, int, str]]:
    """(pid, pgid, state) of every process below this one, from /proc."""
    children: dict[int, list[tuple[int, int, str]]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            fields = stat_fields(name)
            if fields and len(fields) > 2:
                children.setdefault(int(fields[1]), []).append(
                    (int(name), int(fields[2]), fields[0])
                )
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def kill_tree(pgid: int, sig: int) -> None:
    """Signal the workload's process group and every other process descended from us."""
    killpg(pgid, sig)
    for pid, group, state in descendants():
        if group != pgid and state not in "ZX":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def tree_alive(pgid: int, main_pid: int) -> bool:
    if group_has_live_members(pgid):
        return True
    return any(state not in "ZX" and pid != main_pid for pid, _, state in descendants())


def reap_orphans(main_pid: int) -> None:
    """Collect the exit status of adopted orphans (not the main process: reaped last)."""
    for pid, _, _ in descendants():
        if pid != main_pid:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
