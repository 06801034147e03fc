"""Watching a run as a SkyPilot or dstack user expects, through the real CLI and server:
why a queued run waits (`--wait`, `--follow`, `tau logs -f`), a failed run's log tail,
Ctrl-C that leaves the run going (and a second one that cancels it), and errors that
name the flag the user typed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ptyproc import TtyProc
from tauproc import TAU, Tau

PY = sys.executable
FAILING = "for i in $(seq 1 15); do echo line $i; done; exit 3"


def _hold_the_gpu(tau: Tau, gate: Path) -> str:
    """A server with one GPU and a run on it until ``gate`` exists."""
    tau.start_server("--gpus", "1")
    wait = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
    run = tau.json("run", "--name", "holder", "--gpus", "1", "--", PY, "-c", wait)["run"]
    tau.wait_state(run["id"], {"RUNNING"})
    return str(run["id"])


def _spawn(tau: Tau, *args: str) -> subprocess.Popen[str]:
    """The CLI, piped (not a terminal), in a session of its own (for os.killpg)."""
    return subprocess.Popen(
        [*TAU, *args],
        cwd=tau.cwd,
        env=tau.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _waiting(tau: Tau, name: str, timeout: float = 30) -> dict[str, Any]:
    """The run named ``name`` once the scheduler has said why it waits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = tau("status", name, "-o", "json")
        if proc.returncode == 0:
            import json

            run: dict[str, Any] = json.loads(proc.stdout)
            if run["state"] == "QUEUED" and run["pending"]:
                return run
        time.sleep(0.1)
    raise AssertionError(f"{name} never waited with a reason")


def test_wait_says_why_the_run_waits_and_ends_a_failure_with_its_log_tail(
    tau: Tau, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    _hold_the_gpu(tau, gate)
    watcher = _spawn(
        tau, "run", "--name", "waiter", "--gpus", "1", "--wait", "--", "sh", "-c", FAILING
    )
    run_id = _waiting(tau, "waiter")["id"]
    time.sleep(1.0)  # five polls of the watch while it waits
    gate.write_text("go")
    _, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 3, err

    lines = err.splitlines()
    why = [i for i, line in enumerate(lines) if "#1 in default: WaitingForQuota (" in line]
    assert len(why) == 1, err  # said once, not at every poll
    assert re.search(r"QUEUED\s+#1 in default: WaitingForQuota \(.*1 of 1 in use", lines[why[0]])
    assert "position 1 of" not in lines[why[0]]  # "#1" says it already
    admitted = next(i for i, line in enumerate(lines) if "ADMITTED" in line)
    assert why[0] < admitted

    end = next(i for i, line in enumerate(lines) if line.startswith(f"run {run_id} FAILED after"))
    assert lines[end].endswith("(exit 3)")
    assert lines[end + 1 :] == [f"  line {n}" for n in range(6, 16)] + [
        f"full log: tau logs {run_id}"
    ]


def test_follow_and_logs_f_say_why_the_run_waits_then_stream_it(tau: Tau, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    _hold_the_gpu(tau, gate)
    job = "echo started; exit 4"
    follow = _spawn(tau, "run", "--name", "fol", "--gpus", "1", "--follow", "--", "sh", "-c", job)
    run_id = _waiting(tau, "fol")["id"]
    logs = _spawn(tau, "logs", run_id, "-f")
    time.sleep(1.5)  # both keep polling while it waits
    gate.write_text("go")
    out, err = follow.communicate(timeout=60)
    logs_out, logs_err = logs.communicate(timeout=60)

    expected = f"run {run_id} is waiting: #1 in default: WaitingForQuota ("
    for stderr in (err, logs_err):
        waiting = [line for line in stderr.splitlines() if line.startswith(expected)]
        assert 1 <= len(waiting) <= 2, stderr  # once per reason, not once per poll
    assert out == "started\n" and logs_out == "started\n"  # stdout is the log alone
    assert follow.returncode == 4 and logs.returncode == 0
    # --follow ends like --wait: the final status line.
    assert re.fullmatch(rf"run {run_id} FAILED after \S+ \(exit 4\)", err.splitlines()[-1])


def test_ctrl_c_without_a_terminal_leaves_the_run_queued_and_says_how_to_cancel(
    tau: Tau, tmp_path: Path
) -> None:
    _hold_the_gpu(tau, tmp_path / "gate")
    watcher = _spawn(tau, "run", "--name", "left", "--gpus", "1", "--wait", "--", "true")
    run_id = _waiting(tau, "left")["id"]
    time.sleep(0.5)
    started = time.monotonic()
    os.killpg(watcher.pid, signal.SIGINT)
    _, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 130
    assert time.monotonic() - started < 2.5  # no window to wait out without a terminal
    assert f"run {run_id} stays queued; stop it with: tau cancel {run_id}" in err
    assert "Ctrl-C again" not in err and "aborted" not in err
    assert tau.json("status", run_id)["state"] == "QUEUED"


def test_one_ctrl_c_on_a_terminal_leaves_the_run_running_after_the_window(tau: Tau) -> None:
    watcher = TtyProc(tau, "run", "--name", "stays", "--wait", "--", "sleep", "60")
    try:
        watcher.wait_for_text("RUNNING ")  # the transcript line of the RUNNING event
        started = time.monotonic()
        watcher.interrupt()
        watcher.wait_for_text("press Ctrl-C again within 3s to cancel it now")
        assert watcher.wait(timeout=30) == 130
        assert time.monotonic() - started >= 3.0
    finally:
        watcher.kill()
    run_id = re.search(
        r"run (stays-\w+) keeps running; stop it with: tau cancel \1", watcher.output
    )
    assert run_id is not None, watcher.output
    assert tau.json("status", run_id.group(1))["state"] == "RUNNING"
    tau("cancel", run_id.group(1), check=True)


def test_a_second_ctrl_c_on_a_terminal_cancels_the_run(tau: Tau) -> None:
    watcher = TtyProc(tau, "run", "--name", "stopme", "--wait", "--", "sleep", "60")
    try:
        watcher.wait_for_text("RUNNING ")
        watcher.interrupt()
        watcher.wait_for_text("press Ctrl-C again")
        watcher.interrupt()
        assert watcher.wait(timeout=30) == 130
    finally:
        watcher.kill()
    found = re.search(r"run (stopme-\w+) (cancelled|is being cancelled)", watcher.output)
    assert found is not None, watcher.output
    assert tau.wait_state(found.group(1), {"CANCELLED", "FAILED", "SUCCEEDED"})["state"] == (
        "CANCELLED"
    )


def test_errors_name_the_flag_as_typed_in_run_and_rerun(tau: Tau) -> None:
    cases = [
        (("--name", "My_Run"), "--name My_Run: name: 'My_Run' is not a DNS-1123 name"),
        (("--workspace", "W S"), "--workspace 'W S': workspace: 'W S' is not a valid name"),
        (("--queue", "Q_"), "--queue Q_: queue: 'Q_' is not a valid name"),
        (("--priority", "Hi!"), "--priority 'Hi!': priority: 'Hi!' is not a valid name"),
        (("--gpus", "-1"), "--gpus -1: resources.gpus: must be at least 0"),
    ]
    for flag, message in cases:
        proc = tau("run", *flag, "--", "true")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(message), proc.stderr
        assert "--set" not in proc.stderr

    first = tau.json("run", "--name", "good", "--wait", "--", "true")
    assert first["spec"]["overrides"] == ["name=good"]  # the record keeps the override text
    for flag, message in cases:
        proc = tau("rerun", "good", *flag)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(message), proc.stderr
    assert len(tau.json("list")["runs"]) == 1  # nothing was created
