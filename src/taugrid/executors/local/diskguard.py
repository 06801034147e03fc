"""The supervisor's watch on the disk: a run's own limit, and the disk filling up.
Stdlib only (the supervisor imports it; see ``supervisor``'s docstring for why).

- Per-run limit (``resources.disk`` or the server's ``--run-disk-limit``): every few
  seconds the supervisor adds up what the run's directories hold (workdir, checkpoints,
  outputs, attempt logs: the run directory) with an ``os.scandir`` walk of ``lstat``
  sizes, never following symlinks; over the limit, the workload is stopped like a
  timeout (outcome ``disk_limit``). The walk backs off when it is costly (a checkpoint
  directory of many files), so it never takes more than ~5% of one core.
- Full disk: a small reserve file, made when the attempt starts, holds back space the
  supervisor frees at the end to write its last log line and final status even when
  the workload has filled the disk. Free space (statvfs) is checked once a second while
  the workload runs and again when it exits; a failed workload that met a full disk is
  reported as ``disk_full`` with the figure, not lost with an empty log.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterable

RESERVE_FILE = "disk.reserve"
RESERVE_BYTES = 256 * 1024
# Below this much free space the disk counts as full: a write of a log line, a status
# file or a checkpoint shard fails or is about to.
FULL_BELOW_BYTES = 1 << 20
FREE_CHECK_EVERY_S = 1.0
USAGE_CHECK_EVERY_S = 2.0
# A walk that took t seconds waits at least this many times t before the next.
USAGE_BACKOFF = 20.0
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def usage_bytes(roots: Iterable[str], skip: frozenset[str] = frozenset()) -> int:
    """Disk space the files under ``roots`` take (allocated blocks, as ``du`` counts,
    hard links once), without following symlinks; paths in ``skip`` are left out."""
    seen: set[tuple[int, int]] = set()
    total = 0
    todo = list(dict.fromkeys(roots))
    while todo:
        top = todo.pop()
        try:
            entries = os.scandir(top)
        except OSError:
            continue
        with entries:
            for entry in entries:
                if entry.path in skip:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                blocks = getattr(st, "st_blocks", None)
                total += blocks * 512 if blocks is not None else st.st_size
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
    return total


def nested_roots(paths: Iterable[str]) -> list[str]:
    """The paths that are not inside another one of them (each file counted once)."""
    real = sorted({os.path.realpath(p) for p in paths if p})
    kept: list[str] = []
    for p in real:
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return kept


def size_text(n: int) -> str:
    """``5.0 MiB``: a figure for a message (exact bytes are in status.json)."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class DiskGuard:
    """One attempt's disk checks; :meth:`tick` from the supervisor's loop."""

    def __init__(self, attempt_dir: str, roots: Iterable[str], limit_bytes: int | None) -> None:
        self.attempt_dir = attempt_dir
        self.reserve = os.path.join(attempt_dir, RESERVE_FILE)
        self.roots = nested_roots(roots)
        self.limit = limit_bytes
        self.used: int | None = None
        self.min_free: int | None = None  # the lowest free space seen while it ran
        self._next_free = 0.0
        self._next_usage = 0.0

    def make_reserve(self) -> str | None:
        """Set the reserve aside; why it could not be, or None."""
        try:
            fd = os.open(self.reserve, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            return f"cannot create the disk reserve: {exc}"
        try:
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            except OSError as exc:
                if exc.errno in DISK_ERRNOS:
                    raise
                os.write(fd, bytes(RESERVE_BYTES))  # a filesystem without fallocate
        except OSError as exc:
            os.close(fd)
            self.release()
            return f"cannot set the disk reserve aside: {exc}"
        os.close(fd)
        return None

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.reserve)

    def check_free(self) -> None:
        free = free_bytes(self.attempt_dir)
        if free is not None and (self.min_free is None or free < self.min_free):
            self.min_free = free

    def tick(self, now: float | None = None) -> str | None:
        """Periodic checks; the message when the run is over its disk limit, else None."""
        now = time.monotonic() if now is None else now
        if now >= self._next_free:
            self._next_free = now + FREE_CHECK_EVERY_S
            self.check_free()
        if self.limit is None or now < self._next_usage:
            return None
        began = time.monotonic()
        self.used = usage_bytes(self.roots, frozenset({self.reserve}))
        cost = time.monotonic() - began
        self._next_usage = now + max(USAGE_CHECK_EVERY_S, USAGE_BACKOFF * cost)
        if self.used > self.limit:
            return (
                f"stopped: the run's files take {size_text(self.used)} ({self.used} bytes), "
                f"over its disk limit of {size_text(self.limit)} ({self.limit} bytes)"
            )
        return None

    def full(self) -> str | None:
        """The message when the disk was (or is) full during the attempt, else None."""
        self.check_free()
        if self.min_free is None or self.min_free >= FULL_BELOW_BYTES:
            return None
        return f"the disk holding TAU_HOME is full ({self.min_free} bytes free)"
