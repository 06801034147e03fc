"""Serve a file of a run's tree that its workload can still change.

Outputs and checkpoints are written by the workload, possibly while the server serves
them. Resolving a path, checking it lies inside the run's directory and opening it later
leaves a window in which the workload swaps a directory for a symlink, and the server
(which can read ``$TAU_HOME``) would then serve whatever the link names. So the file is
opened component by component beneath the root with ``O_NOFOLLOW``, and what is served is
that open file, never the path again.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from taugrid.errors import NotFound

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_beneath(root: Path, rel: str, what: str) -> int:
    """A read-only fd of the regular file ``rel`` inside ``root``, no symlink followed on
    the way; :class:`NotFound` (naming ``what``) for anything else."""
    parts = PurePosixPath(rel).parts
    if not parts or rel.startswith("/") or any(p in ("..", ".") for p in parts):
        raise NotFound(f"{what} has no file '{rel}'")
    try:
        dfd = os.open(root, _DIR_FLAGS)
    except OSError:
        raise NotFound(f"{what} has no file '{rel}'") from None
    fd = -1
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=dfd)
            os.close(dfd)
            dfd = nxt
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dfd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        os.set_blocking(fd, True)
        return fd
    except OSError:
        if fd >= 0:
            os.close(fd)
        raise NotFound(f"{what} has no file '{rel}'") from None
    finally:
        os.close(dfd)
