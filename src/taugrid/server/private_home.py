"""TAU_HOME is the server user's alone: checked and tightened at every start.

The server runs with umask 077, so what it and its supervisors create is private from
the start. This catches what an older version, a copy or a hand edit left open: the
directory itself (0700), every entry at its top (tau.db and its -wal/-shm, token,
admin-token, server.json, logs, runs/, snapshots/, ...) and everything under secrets/.
Group and other bits are removed, with a warning naming the path; nothing is followed
through a symlink. Deeper trees (runs/) need no walk: their directory is 0700.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("taugrid.server")

UMASK = 0o077
DEEP = ("secrets",)  # trees checked all the way down: each file there is a secret


def tighten(home: Path) -> list[Path]:
    """Remove group/other bits from TAU_HOME, its top entries and DEEP trees; what changed."""
    changed: list[Path] = []
    _tighten(home, changed)
    try:
        entries = list(os.scandir(home))
    except OSError:
        return changed
    for entry in entries:
        path = Path(entry.path)
        _tighten(path, changed)
        if entry.name in DEEP and entry.is_dir(follow_symlinks=False):
            for top, dirs, files in os.walk(path):
                for name in dirs + files:
                    _tighten(Path(top) / name, changed)
    return changed


def _tighten(path: Path, changed: list[Path]) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077:
        return
    mode = stat.S_IMODE(st.st_mode)
    try:
        os.chmod(path, mode & 0o7700)
    except OSError as exc:
        log.warning(
            "%s is open to other users (mode %04o) and cannot be changed: %s", path, mode, exc
        )
        return
    log.warning("%s was open to other users (mode %04o); now %04o", path, mode, mode & 0o7700)
    changed.append(path)
