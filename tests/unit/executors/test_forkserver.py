"""The supervisor fork server, with real processes: what it forks is a supervisor like
any other, and when it fails or goes away the server's end says so."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_exec_supervisor import wait_for, write_launch  # same directory

from taugrid.executors.local import forkserver
from taugrid.executors.local.executor import LocalExecutor
from taugrid.executors.local.process import (
    SUPERVISOR_SCRIPT,
    is_supervisor_of,
    pid_alive,
    read_status,
    request_cancel,
)
from taugrid.ports.executor import AttemptKey

ARGV = [sys.executable, "-I", "-S", str(SUPERVISOR_SCRIPT), forkserver.FLAG, "."]


@pytest.fixture
def client() -> Iterator[forkserver.Client]:
    c = forkserver.Client(ARGV)
    yield c
    c.close()


def _exited(attempt: Path) -> dict[str, object]:
    wait_for(lambda: (read_status(attempt) or {}).get("phase") == "exited", 10, "the end")
    status = read_status(attempt)
    assert status is not None
    return status


def test_a_forked_supervisor_is_one_like_any_other(
    client: forkserver.Client, tmp_path: Path
) -> None:
    attempt = write_launch(tmp_path, ["sh", "-c", "echo hello; sleep 30"])
    pid = client.spawn(str(attempt.resolve()))
    wait_for(lambda: (read_status(attempt) or {}).get("phase") == "running", 10, "running")
    # The server recognises it by its pid file and command line, like a fresh one.
    assert int((attempt / "supervisor.pid").read_text()) == pid
    assert is_supervisor_of(pid, attempt)
    assert not is_supervisor_of(pid, tmp_path)
    assert os.getsid(pid) == pid  # detached: a session of its own
    assert request_cancel(attempt)
    status = _exited(attempt)
    assert status["outcome"] == "cancelled"
    assert (attempt / "output.log").read_text() == "hello\n"


def test_its_supervisors_outlive_it_and_a_dead_one_is_replaced(
    client: forkserver.Client, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_launch(tmp_path / "a", ["sleep", "0.5"])
    client.spawn(str(first.resolve()))
    proc = client._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _exited(first)["outcome"] == "succeeded"  # its supervisor carried on
    second = write_launch(tmp_path / "b", ["true"])
    client.spawn(str(second.resolve()))  # a fresh fork server
    assert client._proc is not None and client._proc.pid != proc.pid
    assert _exited(second)["outcome"] == "succeeded"


def test_one_that_fails_to_answer_is_not_asked_again_for_a_while(tmp_path: Path) -> None:
    broken = forkserver.Client([sys.executable, "-c", "pass"])  # exits without answering
    attempt = write_launch(tmp_path, ["true"])
    with pytest.raises(forkserver.Unavailable) as failed:
        broken.spawn(str(attempt.resolve()))
    assert not failed.value.recent
    with pytest.raises(forkserver.Unavailable) as again:
        broken.spawn(str(attempt.resolve()))
    assert again.value.recent
    broken.close()


def test_a_bad_request_is_answered_with_an_error(client: forkserver.Client) -> None:
    with pytest.raises(forkserver.Unavailable, match="absolute attempt directory"):
        client.spawn("relative/attempt")


def test_close_ends_it_and_leaves_its_supervisors_running(
    client: forkserver.Client, tmp_path: Path
) -> None:
    attempt = write_launch(tmp_path, ["sleep", "0.5"])
    pid = client.spawn(str(attempt.resolve()))
    proc = client._proc
    assert proc is not None
    client.close()
    assert proc.returncode == 0
    assert pid_alive(pid) or (read_status(attempt) or {}).get("phase") == "exited"
    assert _exited(attempt)["outcome"] == "succeeded"


def test_its_children_are_reaped(client: forkserver.Client, tmp_path: Path) -> None:
    attempt = write_launch(tmp_path, ["true"])
    pid = client.spawn(str(attempt.resolve()))
    _exited(attempt)
    end = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}"):  # a zombie keeps /proc/<pid>
        assert time.monotonic() < end, "the exited supervisor was never reaped"
        time.sleep(0.02)


def test_executor_names_its_attempts_from_their_directories(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path / "runs")
    assert ex.attempt_of(str(tmp_path / "runs" / "train-abcde" / "attempts" / "3")) == (
        AttemptKey("train-abcde", 3)
    )
    resolved = (tmp_path / "runs").resolve() / "r" / "attempts" / "0"
    assert ex.attempt_of(str(resolved)) == AttemptKey("r", 0)
    for other in (
        tmp_path / "runs" / "r" / "attempts",
        tmp_path / "runs" / "r" / "outputs" / "0",
        tmp_path / "runs" / "r" / "attempts" / "x",
        tmp_path / "elsewhere" / "r" / "attempts" / "0",
        tmp_path / "runs" / ".." / "attempts" / "0",
    ):
        assert ex.attempt_of(str(other)) is None, other
