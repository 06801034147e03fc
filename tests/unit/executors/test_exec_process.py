"""Server-side process helpers: liveness, zombies, reaping, tolerant reads, cancel."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from taugrid.executors.local.files import read_json, write_json_atomic
from taugrid.executors.local.process import (
    pid_alive,
    read_status,
    read_supervisor_pid,
    request_cancel,
    start_supervisor,
)

needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


def _wait_for(predicate: object, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_pid_alive_for_live_and_gone_processes() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(0)
    assert not pid_alive(-5)
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not pid_alive(proc.pid)


@needs_proc
def test_a_zombie_counts_as_dead() -> None:
    proc = subprocess.Popen(["true"])
    try:
        # Exited but not reaped: kill(pid, 0) still succeeds for it.
        _wait_for(lambda: Path(f"/proc/{proc.pid}/stat").read_text().split()[2] == "Z")
        os.kill(proc.pid, 0)
        assert not pid_alive(proc.pid)
    finally:
        proc.wait()


@needs_proc
def test_finished_supervisors_are_reaped_without_being_asked(tmp_path: Path) -> None:
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    write_json_atomic(
        attempt / "launch.json",
        {"command": ["true"], "cwd": str(tmp_path), "env": {}, "stop_grace_s": 1},
    )
    pid = start_supervisor(attempt)
    # The reaper thread (every 0.5 s) removes the zombie: /proc/<pid> disappears.
    _wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=3.0)
    status = read_status(attempt)
    assert status is not None and status["outcome"] == "succeeded"


def test_start_supervisor_needs_a_launch_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        start_supervisor(tmp_path)


def test_reads_tolerate_missing_and_partial_files(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None
    assert read_supervisor_pid(tmp_path) is None
    (tmp_path / "status.json").write_text('{"phase": "runn')
    (tmp_path / "supervisor.pid").write_text("12")
    assert read_status(tmp_path) is None
    (tmp_path / "status.json").write_text("[1]")
    assert read_status(tmp_path) is None
    assert read_supervisor_pid(tmp_path) == 12
    (tmp_path / "supervisor.pid").write_text("")
    assert read_supervisor_pid(tmp_path) is None


def test_cancel_of_a_finished_or_vanished_supervisor(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "status.json", {"phase": "exited", "outcome": "succeeded"})
    assert not request_cancel(tmp_path)
    assert not (tmp_path / "cancel").exists()

    write_json_atomic(tmp_path / "status.json", {"phase": "running"})
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "supervisor.pid").write_text(f"{dead.pid}\n")
    assert not request_cancel(tmp_path)

    # A live pid that is not this attempt's supervisor (a recycled pid) is not signalled.
    (tmp_path / "supervisor.pid").write_text(f"{os.getpid()}\n")
    if os.path.isdir("/proc/self"):
        assert not request_cancel(tmp_path)


def test_write_json_atomic_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": 2, "b": [None, "é"]})
    assert read_json(path) == {"a": 2, "b": [None, "é"]}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
