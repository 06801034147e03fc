"""The server's free-space rules: headroom, the reserve, and what counts as "disk full"."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy.exc import OperationalError

from taugrid.errors import ERRORS_BY_CODE, DiskFull
from taugrid.server.diskspace import (
    DiskSpace,
    Headroom,
    check_disk_settings,
    is_disk_full,
    parse_headroom,
    run_disk_limit,
)

MiB = 1 << 20


class Disk:
    """A filesystem of a given size whose free space the test sets; the reserve file is
    real (in tmp_path) and taken from the free space while it exists."""

    def __init__(self, home: Path, size: int, free: int) -> None:
        self.home, self.size, self.free = home, size, free

    def statvfs(self, _path: str) -> os.statvfs_result:
        reserve = self.home / "disk.reserve"
        used = reserve.stat().st_size if reserve.exists() else 0
        free = max(self.free - used, 0)
        return os.statvfs_result((4096, 4096, self.size // 4096, 0, free // 4096, 0, 0, 0, 0, 255))


def test_headroom_syntax() -> None:
    assert parse_headroom("256Mi") == Headroom(bytes=256 * MiB)
    assert parse_headroom("1%") == Headroom(fraction=0.01)
    assert parse_headroom("0") == Headroom(bytes=0)
    assert parse_headroom("1%").of(1000 * MiB) == 10 * MiB
    for bad in ("lots", "120%", "-1%", "512m"):
        with pytest.raises(ValueError):
            parse_headroom(bad)
    assert check_disk_settings("256Mi", None) is None
    assert "--min-free-disk" in (check_disk_settings("lots", None) or "")
    assert "--run-disk-limit" in (check_disk_settings("1%", "big") or "")


def test_run_disk_limit_from_the_spec_or_the_default() -> None:
    assert run_disk_limit({"resources": {"disk": "1Mi"}}, 5) == MiB
    assert run_disk_limit({"resources": {}}, 5) == 5
    assert run_disk_limit({}, None) is None


def test_headroom_refuses_new_work_and_the_reserve_waits_for_a_full_disk(tmp_path: Path) -> None:
    disk = Disk(tmp_path, 1024 * MiB, free=500 * MiB)
    now = [0.0]
    space = DiskSpace(
        tmp_path,
        Headroom(bytes=64 * MiB),
        reserve_bytes=16 * MiB,
        statvfs=disk.statvfs,
        clock=lambda: now[0],
    )
    space.maintain()
    assert (tmp_path / "disk.reserve").stat().st_size == 16 * MiB
    space.check("submission")  # plenty of room

    disk.free = 70 * MiB  # 54 MiB left besides the reserve: under the headroom
    with pytest.raises(DiskFull, match="submission refused") as err:
        space.check("submission")
    assert "--min-free-disk" in err.value.message
    assert (tmp_path / "disk.reserve").exists()  # short, not full: kept

    disk.free = 16 * MiB  # nothing left but the reserve itself: full
    space.maintain()
    now[0] = 0.5
    space.maintain()
    assert (tmp_path / "disk.reserve").exists()  # full for less than a second
    now[0] = 1.2
    space.maintain()
    assert not (tmp_path / "disk.reserve").exists()  # given back for state changes
    with pytest.raises(DiskFull):  # the space it gave back is not free for new work
        space.check("submission")

    disk.free = 75 * MiB  # above the headroom, but not with room for the reserve too
    with pytest.raises(DiskFull):
        space.check("submission")
    disk.free = 90 * MiB
    space.check("submission")
    assert (tmp_path / "disk.reserve").exists()


def test_a_failed_write_gives_the_reserve_back_a_second_later(tmp_path: Path) -> None:
    # e.g. a quota (EDQUOT) that statvfs does not show, or space taken between checks
    disk = Disk(tmp_path, 1024 * MiB, free=500 * MiB)
    now = [0.0]
    space = DiskSpace(
        tmp_path, Headroom(bytes=0), reserve_bytes=MiB, statvfs=disk.statvfs, clock=lambda: now[0]
    )
    space.maintain()
    space.note_full()
    space.maintain()
    assert (tmp_path / "disk.reserve").exists()
    now[0] = 1.0
    space.maintain()
    assert not (tmp_path / "disk.reserve").exists()


def test_a_completely_full_disk_without_headroom_still_refuses(tmp_path: Path) -> None:
    disk = Disk(tmp_path, 100 * MiB, free=0)
    space = DiskSpace(tmp_path, Headroom(bytes=0), reserve_bytes=MiB, statvfs=disk.statvfs)
    with pytest.raises(DiskFull):
        space.check("submission")


def test_what_counts_as_disk_full() -> None:
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(ValueError("x"))
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # type: ignore[attr-defined]
    assert is_disk_full(OperationalError("INSERT", {}, full))
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 5  # type: ignore[attr-defined]
    assert not is_disk_full(OperationalError("INSERT", {}, locked))
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise RuntimeError("while writing") from exc
    except RuntimeError as wrapped:
        assert is_disk_full(wrapped)


def test_a_real_sqlite_full_error_is_recognised(tmp_path: Path) -> None:
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA max_page_count = 2")
        conn.exec_driver_sql("CREATE TABLE t (x TEXT)")
    with pytest.raises(OperationalError) as err, engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA max_page_count = 2")
        conn.exec_driver_sql("INSERT INTO t VALUES (?)", ("y" * 100_000,))
    assert is_disk_full(err.value)
    engine.dispose()


def test_disk_full_is_a_registered_error() -> None:
    assert ERRORS_BY_CODE["disk_full"] is DiskFull
    assert (DiskFull.http_status, DiskFull.exit_code) == (507, 10)


def test_the_server_refuses_bad_disk_flags(tmp_path: Path) -> None:
    for flag, value in (("--min-free-disk", "lots"), ("--run-disk-limit", "512m")):
        proc = subprocess.run(
            [sys.executable, "-m", "taugrid.server", "--home", str(tmp_path), flag, value],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(flag) and "server.json" not in os.listdir(tmp_path)
