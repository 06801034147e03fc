"""Free space on the disk holding TAU_HOME: headroom for new work, a reserve for state.

One run filling the disk must not stop everything else. The server therefore

- refuses new work (submissions, launches) with ``DiskFull`` (HTTP 507) while free space
  is below the headroom (``--min-free-disk``, a quantity such as ``256Mi`` or a share
  of the filesystem such as ``1%``);
- keeps a reserve file (16 MiB) in TAU_HOME that it deletes once the disk has been full
  (or a write failed for lack of space) for a second, so the state changes under way
  (runs finishing, cancels) can still commit; it is set aside again once there is room
  for it above the headroom. While it is released, the space it gave back does not
  count as free for new work. Not at once: the supervisor of the run that filled the
  disk checks the free space the moment its workload fails, and must still find the
  disk full to report it (a write that fails meanwhile is retried: the engine's on its
  next pass, an API request by its caller after the 507);
- turns every "no space" error that reaches the API (ENOSPC/EDQUOT, SQLite's "database
  or disk is full", PostgreSQL's disk_full) into the JSON ``disk_full`` error
  (:func:`is_disk_full`) instead of a plain-text 500.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taugrid.errors import DiskFull
from taugrid.spec.units import quantity_bytes

log = logging.getLogger("taugrid.server")

RESERVE_FILE = "disk.reserve"
RESERVE_BYTES = 16 << 20
DEFAULT_MIN_FREE = "256Mi"
FULL_BELOW_BYTES = 1 << 20  # as the supervisor counts it (executors/local/diskguard.py)
FULL_FOR_S = 1.0  # full (or a write failed) this long: give the reserve back
RETRY_RESERVE_S = 30.0
_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full"
_PG_DISK_FULL = "53100"  # SQLSTATE disk_full
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclass(frozen=True)
class Headroom:
    """Free space to keep: a byte count, or a fraction of the filesystem's size."""

    bytes: int | None = None
    fraction: float | None = None

    def of(self, total: int) -> int:
        if self.fraction is not None:
            return int(total * self.fraction)
        return self.bytes or 0

    def __str__(self) -> str:
        if self.fraction is not None:
            return f"{self.fraction * 100:g}%"
        return f"{self.bytes} bytes"


def parse_headroom(text: str) -> Headroom:
    """``256Mi``, ``1G``, ``0`` (no headroom) or ``1%``; ValueError with a clear message."""
    text = text.strip()
    if text.endswith("%"):
        try:
            pct = float(text[:-1])
        except ValueError:
            raise ValueError(f"{text!r} is not a percentage such as 1%") from None
        if not 0 <= pct < 100:
            raise ValueError(f"{text!r}: a percentage must be from 0% to under 100%")
        return Headroom(fraction=pct / 100)
    if text == "0":
        return Headroom(bytes=0)
    return Headroom(bytes=quantity_bytes(text))


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the disk or a quota is full."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _DISK_ERRNOS:
            return True
        if getattr(current, "sqlite_errorcode", None) == _SQLITE_FULL:
            return True
        if getattr(current, "sqlstate", None) == _PG_DISK_FULL:
            return True
        orig = getattr(current, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's
        if isinstance(orig, BaseException) and id(orig) not in seen:
            current = orig
            continue
        current = current.__cause__ or current.__context__
    return False


class DiskSpace:
    """Headroom checks and the reserve for one TAU_HOME; safe to call from any thread."""

    def __init__(
        self,
        home: Path,
        headroom: Headroom,
        *,
        reserve_bytes: int = RESERVE_BYTES,
        statvfs: Callable[[str], os.statvfs_result] = os.statvfs,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.home = home
        self.headroom = headroom
        self.reserve = home / RESERVE_FILE
        self.reserve_bytes = reserve_bytes
        self._statvfs = statvfs
        self._clock = clock
        self._full_since: float | None = None  # free space under FULL_BELOW_BYTES since
        self._failed_at: float | None = None  # a write failed for lack of space at
        self._make_at = 0.0  # not before: setting the reserve aside failed
        self._lock = threading.Lock()

    def _figures(self) -> tuple[int, int, bool] | None:
        """(bytes free on the filesystem, its size, whether the reserve is set aside)."""
        try:
            st = self._statvfs(str(self.home))
        except OSError:
            return None
        return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize, self.reserve.exists()

    def short_by(self) -> tuple[int, int] | None:
        """(free, needed) when free space for new work is below the headroom, else None.

        While the reserve is released, the space it gave back is for state changes, not
        for new work, so it does not count as free."""
        figures = self._figures()
        if figures is None:
            return None
        free, total, have = figures
        if not have:
            free = max(free - self.reserve_bytes, 0)
        needed = self.headroom.of(total)
        return (free, needed) if free < needed or (not have and free == 0) else None

    def check(self, what: str) -> None:
        """Raise DiskFull when ``what`` (new work) must wait for free space."""
        self.maintain()
        short = self.short_by()
        if short is not None:
            raise DiskFull(full_message(what, *short))

    def maintain(self) -> None:
        """Release the reserve once the disk has been full for FULL_FOR_S; set it aside
        again when there is room for it above the headroom. Cheap (a statvfs); the
        engine calls it on each pass."""
        with self._lock:
            figures = self._figures()
            if figures is None:
                return
            free, total, have = figures
            needed = self.headroom.of(total)
            now = self._clock()
            if free >= FULL_BELOW_BYTES:
                self._full_since = None
            elif self._full_since is None:
                self._full_since = now
            if not have:
                self._failed_at = None  # nothing left to give back for it
            since = [t for t in (self._full_since, self._failed_at) if t is not None]
            if have and since and now - min(since) >= FULL_FOR_S:
                self._release()
                self._full_since = self._failed_at = None
            elif (
                not have
                and free >= needed + self.reserve_bytes
                and now >= self._make_at
                and not self._make()
            ):
                self._make_at = now + RETRY_RESERVE_S  # e.g. a quota that statvfs can't see

    def note_full(self) -> None:
        """A write just failed for lack of space: the disk counts as full from now (the
        reserve goes back FULL_FOR_S later, see the module docstring)."""
        with self._lock:
            if self._failed_at is None:
                self._failed_at = self._clock()

    def _release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.reserve.unlink()
            log.warning(
                "disk holding %s is full: released the %d-byte reserve",
                self.home,
                self.reserve_bytes,
            )

    def _make(self) -> bool:
        tmp = self.reserve.with_suffix(".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                try:
                    os.posix_fallocate(fd, 0, self.reserve_bytes)
                except OSError as exc:
                    if exc.errno in _DISK_ERRNOS:
                        raise
                    os.write(fd, bytes(self.reserve_bytes))
            finally:
                os.close(fd)
            os.replace(tmp, self.reserve)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            log.warning("cannot set aside the disk reserve in %s: %s", self.home, exc)
            return False
        return True


def full_message(what: str, free: int, needed: int) -> str:
    return (
        f"{what} refused: the disk holding TAU_HOME has {_mib(free)} free, under the "
        f"{_mib(needed)} the server keeps free (--min-free-disk); free some space "
        "(e.g. remove finished runs' files) and try again"
    )


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def check_disk_settings(min_free_disk: str, run_disk_limit: str | None) -> str | None:
    """Why the server's disk flags are unusable, or None (checked before starting)."""
    try:
        parse_headroom(min_free_disk)
    except ValueError as exc:
        return f"--min-free-disk: {exc}"
    if run_disk_limit is not None:
        try:
            quantity_bytes(run_disk_limit)
        except ValueError as exc:
            return f"--run-disk-limit: {exc}"
    return None


def run_disk_limit(spec: dict[str, Any], default: int | None) -> int | None:
    """Bytes a run's files may take: its ``resources.disk``, else the server's default."""
    disk = (spec.get("resources") or {}).get("disk")
    return quantity_bytes(disk) if disk is not None else default
