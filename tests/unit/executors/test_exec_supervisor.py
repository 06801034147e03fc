"""The per-run supervisor, driven through its file contract with real processes."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from taugrid.domain.stops import StopReason
from taugrid.executors.local.executor import LocalExecutor
from taugrid.executors.local.files import write_json_atomic
from taugrid.executors.local.process import (
    pid_alive,
    read_status,
    read_supervisor_pid,
    reap_supervisors,
    request_cancel,
    start_supervisor,
    supervisor_running,
)
from taugrid.ports.executor import AttemptKey

ENV = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"}


def write_launch(tmp_path: Path, command: list[str] | str, **fields: Any) -> Path:
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    launch: dict[str, Any] = {
        "command": command,
        "setup": None,
        "cwd": str(work),
        "env": ENV,
        "stop_grace_s": 0.5,
        "timeout_s": None,
        "outputs": [],
        "output_dir": str(tmp_path / "outputs"),
        "notify": None,
    }
    launch.update(fields)
    write_json_atomic(attempt / "launch.json", launch)
    return attempt


def wait_for(predicate: Any, timeout: float = 5.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def wait_phase(attempt: Path, phase: str, timeout: float = 5.0) -> dict[str, Any]:
    wait_for(
        lambda: (read_status(attempt) or {}).get("phase") == phase,
        timeout,
        f"phase {phase} in {attempt}",
    )
    status = read_status(attempt)
    assert status is not None
    return status


def wait_supervisor_gone(pid: int) -> None:
    wait_for(lambda: not pid_alive(pid), what=f"supervisor {pid} to exit")
    reap_supervisors()


def run(tmp_path: Path, command: list[str] | str, **fields: Any) -> tuple[dict[str, Any], Path]:
    attempt = write_launch(tmp_path, command, **fields)
    pid = start_supervisor(attempt)
    status = wait_phase(attempt, "exited")
    wait_supervisor_gone(pid)
    assert read_supervisor_pid(attempt) == pid
    return status, attempt


def output(attempt: Path) -> str:
    return (attempt / "output.log").read_text()


def test_success_keeps_stdout_and_stderr_in_one_log(tmp_path: Path) -> None:
    status, attempt = run(tmp_path, ["sh", "-c", "echo out1; echo err1 >&2; echo out2"])
    assert output(attempt) == "out1\nerr1\nout2\n"
    assert status["outcome"] == "succeeded"
    assert (status["exit_code"], status["signal"], status["missing_outputs"]) == (0, None, [])
    assert status["pid"] == status["pgid"] and status["pid"] != status["supervisor_pid"]
    assert status["started_at"] <= status["finished_at"]


def test_failure_exit_code(tmp_path: Path) -> None:
    status, _ = run(tmp_path, ["sh", "-c", "exit 3"])
    assert (status["outcome"], status["exit_code"], status["signal"]) == ("failed", 3, None)


def test_command_not_found(tmp_path: Path) -> None:
    status, attempt = run(tmp_path, ["no-such-command-tau"])
    assert (status["outcome"], status["exit_code"], status["pid"]) == ("failed", 127, None)
    assert "no-such-command-tau" in status["error"]
    assert "cannot start the workload" in output(attempt)


def test_missing_cwd(tmp_path: Path) -> None:
    status, attempt = run(tmp_path, ["true"], cwd=str(tmp_path / "gone"))
    assert (status["outcome"], status["exit_code"]) == ("failed", 127)
    assert "gone" in output(attempt)


def test_string_command_runs_in_a_shell(tmp_path: Path) -> None:
    status, attempt = run(tmp_path, "for i in 1 2 3; do echo $i; done | tr 123 abc && exit 4")
    assert output(attempt) == "a\nb\nc\n"
    assert status["exit_code"] == 4


@pytest.mark.parametrize(
    "command", [["sh", "-c", "echo $X $(basename $PWD)"], "echo $X ${PWD##*/}"]
)
def test_setup_runs_first_in_the_same_shell(tmp_path: Path, command: list[str] | str) -> None:
    (tmp_path / "work" / "sub").mkdir(parents=True)
    status, attempt = run(tmp_path, command, setup="cd sub && export X=1 # comment\necho setup")
    assert output(attempt) == "setup\n1 sub\n"
    assert status["outcome"] == "succeeded"


def test_failed_setup_skips_the_command(tmp_path: Path) -> None:
    status, attempt = run(tmp_path, ["echo", "command"], setup="echo setup; exit 5")
    assert output(attempt) == "setup\n"
    assert status["exit_code"] == 5


def test_env_is_exactly_the_launch_env(tmp_path: Path) -> None:
    env = {"PATH": ENV["PATH"], "TAU_RUN_ID": "r-1", "SPACES": "a b"}
    _, attempt = run(tmp_path, ["env"], env=env)
    assert sorted(output(attempt).splitlines()) == sorted(f"{k}={v}" for k, v in env.items())


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_workload_gets_default_signal_dispositions(tmp_path: Path) -> None:
    # The supervisor ignores SIGINT/SIGHUP; the workload must not inherit that.
    _, attempt = run(tmp_path, ["grep", "SigIgn", "/proc/self/status"])
    ignored = int(output(attempt).split()[1], 16)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        assert not ignored & (1 << (sig - 1)), sig


def test_outputs_are_copied(tmp_path: Path) -> None:
    status, _ = run(
        tmp_path,
        "mkdir -p out/sub && echo a > out/sub/a.txt && echo m > model.bin",
        outputs=["out/", "model.bin", "missing.txt", "../escape"],
    )
    outputs = tmp_path / "outputs"
    assert (outputs / "out" / "sub" / "a.txt").read_text() == "a\n"
    assert (outputs / "model.bin").read_text() == "m\n"
    assert status["missing_outputs"] == ["missing.txt", "../escape"]
    assert status["outcome"] == "succeeded"


def test_stray_processes_are_killed_after_the_main_process_exits(tmp_path: Path) -> None:
    status, _ = run(tmp_path, "sleep 30 & echo $! > child.pid")
    child = int((tmp_path / "work" / "child.pid").read_text())
    assert status["outcome"] == "succeeded"
    wait_for(lambda: not pid_alive(child), 2.0, "the stray child to die")


TRAP_TERM = (
    "trap 'echo got-term > term.marker; exit 0' TERM; "
    "sleep 30 & echo $! > child.pid; echo ready > ready; wait"
)


def test_cancel_terminates_the_whole_group(tmp_path: Path) -> None:
    attempt = write_launch(tmp_path, TRAP_TERM)
    pid = start_supervisor(attempt)
    work = tmp_path / "work"
    wait_for(lambda: (work / "ready").exists(), what="workload ready")
    assert wait_phase(attempt, "running")["supervisor_pid"] == pid
    assert supervisor_running(attempt)
    assert request_cancel(attempt)
    status = wait_phase(attempt, "exited")
    assert (status["outcome"], status["exit_code"], status["signal"]) == ("cancelled", 0, None)
    assert (work / "term.marker").read_text() == "got-term\n"
    child = int((work / "child.pid").read_text())
    wait_for(lambda: not pid_alive(child), 2.0, "the workload's child to die")
    wait_supervisor_gone(pid)
    assert not request_cancel(attempt)  # already gone
    assert not supervisor_running(attempt)


def test_cancel_escalates_to_sigkill_after_the_grace(tmp_path: Path) -> None:
    attempt = write_launch(
        tmp_path, "trap '' TERM; echo ready > ready; while :; do sleep 0.05; done"
    )
    pid = start_supervisor(attempt)
    wait_for(lambda: (tmp_path / "work" / "ready").exists(), what="workload ready")
    wait_phase(attempt, "running")
    started = time.monotonic()
    assert request_cancel(attempt)
    status = wait_phase(attempt, "exited")
    assert time.monotonic() - started >= 0.45  # stop_grace_s is 0.5
    assert status["outcome"] == "cancelled"
    assert (status["signal"], status["exit_code"]) == (signal.SIGKILL, 128 + signal.SIGKILL)
    wait_supervisor_gone(pid)


@pytest.mark.parametrize("reason", ["hardware", "preempt"])
def test_the_stop_reason_comes_back_with_the_exit(tmp_path: Path, reason: str) -> None:
    """The reason the server gave with the stop is what the final status reports (the
    engine decides requeue or hardware restart from it, not from its own columns)."""
    attempt = write_launch(tmp_path, TRAP_TERM)
    pid = start_supervisor(attempt)
    wait_for(lambda: (tmp_path / "work" / "ready").exists(), what="workload ready")
    wait_phase(attempt, "running")
    assert request_cancel(attempt, reason)
    status = wait_phase(attempt, "exited")
    assert (status["outcome"], status["stop_reason"]) == ("cancelled", reason)
    wait_supervisor_gone(pid)
    where = tmp_path / "runs" / "r" / "attempts" / "0"  # as the executor lays attempts out
    where.parent.mkdir(parents=True)
    attempt.rename(where)
    (obs,) = LocalExecutor(tmp_path / "runs").observe_many([AttemptKey("r", 0)]).values()
    assert obs.exit is not None and obs.exit.stop_reason == StopReason(reason)


def test_cancel_before_the_workload_starts(tmp_path: Path) -> None:
    attempt = write_launch(tmp_path, "echo ran > ran.marker")
    assert request_cancel(attempt)  # no supervisor yet: recorded in the `cancel` file
    pid = start_supervisor(attempt)
    status = wait_phase(attempt, "exited")
    wait_supervisor_gone(pid)
    assert (status["outcome"], status["pid"], status["exit_code"]) == ("cancelled", None, None)
    assert not (tmp_path / "work" / "ran.marker").exists()


def test_timeout(tmp_path: Path) -> None:
    status, _ = run(tmp_path, ["sleep", "10"], timeout_s=0.3)
    assert status["outcome"] == "timeout"
    assert (status["signal"], status["exit_code"]) == (signal.SIGTERM, 128 + signal.SIGTERM)
    assert 0.25 < status["finished_at"] - status["started_at"] < 2.0


def test_invalid_launch_is_reported(tmp_path: Path) -> None:
    status, attempt = run(tmp_path, [], env={"A": 1})
    assert status["outcome"] == "failed" and "command" in status["error"]
    assert "command" in output(attempt)


def test_second_supervisor_for_the_same_attempt_does_nothing(tmp_path: Path) -> None:
    attempt = write_launch(tmp_path, "echo once >> count.txt")
    first = start_supervisor(attempt)
    second = start_supervisor(attempt)
    wait_phase(attempt, "exited")
    wait_supervisor_gone(first)
    wait_supervisor_gone(second)
    assert (tmp_path / "work" / "count.txt").read_text() == "once\n"
    assert read_supervisor_pid(attempt) in (first, second)


class _Recorder(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str | None, dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Authorization"], json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_notify_posts_each_status_with_the_token(tmp_path: Path) -> None:
    _Recorder.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        token = tmp_path / "token"
        token.write_text("s3cret\n")
        url = f"http://127.0.0.1:{server.server_address[1]}/api/v1/internal/attempts"
        status, attempt = run(tmp_path, ["true"], notify={"url": url, "token_file": str(token)})
        wait_for(lambda: len(_Recorder.received) == 2, what="two notifications")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    (p1, auth1, body1), (_, auth2, body2) = _Recorder.received
    assert p1 == "/api/v1/internal/attempts"
    assert auth1 == auth2 == "Bearer s3cret"
    assert body1["attempt_dir"] == str(attempt.resolve())
    assert body1["status"]["phase"] == "running"
    assert body2["status"] == status


def test_unreachable_notify_url_is_ignored(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    status, _ = run(
        tmp_path, ["true"], notify={"url": "http://127.0.0.1:9/x", "token_file": str(token)}
    )
    assert status["outcome"] == "succeeded"


def test_supervisor_survives_the_death_of_its_parent(tmp_path: Path) -> None:
    attempt = write_launch(tmp_path, "sleep 0.5; echo done")
    # An intermediate parent in its own group that starts the supervisor the plain way
    # (`-m`, same group, no detaching), then gets SIGKILLed with its whole group.
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-m', 'taugrid.executors.local.supervisor',"
        " sys.argv[1]])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(attempt)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        wait_phase(attempt, "running")
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    assert os.getsid(pid) == pid  # it left the parent's session and group itself
    os.kill(pid, signal.SIGHUP)
    os.kill(pid, signal.SIGINT)
    status = wait_phase(attempt, "exited")
    assert status["outcome"] == "succeeded"
    assert output(attempt) == "done\n"
    assert status["supervisor_pid"] == pid


# A child in a session of its own (as torchrun starts its workers): not in the workload's
# process group, so only the supervisor being its subreaper finds it.
SESSION_CHILD = (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
    " start_new_session=True)\n"
    "open('child.pid', 'w').write(str(c.pid))\n"
    "open('ready', 'w').write('1')\n"
    "time.sleep(float(sys.argv[1]))\n"
)


@pytest.mark.parametrize("mode", ["main-exits", "cancel", "main-killed"])
def test_processes_in_their_own_session_die_with_the_run(tmp_path: Path, mode: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "spawn.py").write_text(SESSION_CHILD)
    linger = "0" if mode == "main-exits" else "60"
    attempt = write_launch(tmp_path, [sys.executable, "spawn.py", linger])
    start_supervisor(attempt)
    wait_for(lambda: (work / "ready").exists(), what="workload ready")
    child = int((work / "child.pid").read_text())
    assert os.getpgid(child) != os.getpgid(wait_phase(attempt, "running")["pid"])
    if mode == "cancel":
        assert request_cancel(attempt)
    elif mode == "main-killed":
        os.kill(wait_phase(attempt, "running")["pid"], signal.SIGKILL)
    status = wait_phase(attempt, "exited")
    expected = {"main-exits": "succeeded", "cancel": "cancelled", "main-killed": "failed"}
    assert status["outcome"] == expected[mode]
    wait_for(lambda: not pid_alive(child), 3.0, "the child in its own session to die")
