"""Submit, watch, read logs, fetch outputs and cancel through the real CLI and server."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tauproc import Tau, write_spec

PY = sys.executable


def test_run_wait_logs_get_and_records(tau: Tau, tmp_path: Path) -> None:
    proj = tau.cwd / "proj"
    (proj / "data").mkdir(parents=True)
    (proj / "data" / "big.bin").write_bytes(b"x" * 1000)
    (proj / "keep.txt").write_text("kept\n")
    (proj / "skip.log").write_text("no\n")
    (proj / ".gitignore").write_text("*.log\n")
    (proj / "job.py").write_text(
        "import os, sys, pathlib\n"
        "print('hello', os.environ['LR'], os.environ['TAU_RUN_ID'], flush=True)\n"
        "print('to stderr', file=sys.stderr, flush=True)\n"
        "assert not pathlib.Path('data').exists() and not pathlib.Path('skip.log').exists()\n"
        "assert pathlib.Path('keep.txt').read_text() == 'kept\\n'\n"
        "pathlib.Path(os.environ['TAU_OUTPUT_DIR'], 'model.txt').write_text('weights')\n"
        "pathlib.Path('report').mkdir(); pathlib.Path('report/r.txt').write_text('r')\n"
    )
    write_spec(
        proj,
        f"name: demo\ncommand: [{PY}, job.py]\nenv: {{LR: '3e-4'}}\n"
        "exclude: [data/]\noutputs: [report/]\n",
    )
    proc = tau("run", "--wait", cwd=proj)
    assert proc.returncode == 0, proc.stderr
    assert "SUCCEEDED" in proc.stderr and "RUNNING" in proc.stderr

    detail = tau.json("status", "demo")
    assert detail["state"] == "SUCCEEDED" and detail["exit_code"] == 0
    assert [e["to_state"] for e in detail["events"]] == [
        "PENDING",
        "QUEUED",
        "ADMITTED",
        "RUNNING",
        "SUCCEEDED",
    ]
    assert detail["spec"]["file_text"].startswith("name: demo")
    assert detail["spec"]["resolved"]["env"] == {"LR": "3e-4"}
    assert detail["attempt_list"][0]["outcome"] == "succeeded"

    logs = tau("logs", "demo", check=True).stdout
    assert f"hello 3e-4 {detail['id']}" in logs and "to stderr" in logs
    assert tau("logs", detail["id"][:-2], "--tail", "1", check=True).stdout == "to stderr\n"

    out = tmp_path / "got"
    tau("get", "demo", "-d", str(out), check=True)
    assert (out / "model.txt").read_text() == "weights"
    assert (out / "report" / "r.txt").read_text() == "r"

    table = tau("status", check=True).stdout
    assert detail["id"] in table and "SUCCEEDED" in table


def test_wait_exits_with_the_workload_exit_code(tau: Tau) -> None:
    proc = tau("run", "--wait", "--name", "fails", "--", "sh", "-c", "echo bye; exit 3")
    assert proc.returncode == 3
    data = tau.json("status", "fails")
    assert (data["state"], data["reason"], data["exit_code"]) == ("FAILED", "ExitCode", 3)


def test_command_not_found_fails_with_reason(tau: Tau) -> None:
    proc = tau("run", "--wait", "--name", "nocmd", "--", "definitely-not-a-command-xyz")
    assert proc.returncode == 127
    data = tau.json("status", "nocmd")
    assert data["state"] == "FAILED" and data["exit_code"] == 127


def test_follow_streams_logs_while_running(tau: Tau) -> None:
    proc = tau(
        "run",
        "--follow",
        "--name",
        "streamer",
        "--",
        PY,
        "-c",
        "import time\nfor i in range(5):\n print('line', i, flush=True); time.sleep(0.1)",
    )
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == [f"line {i}" for i in range(5)]


def test_cancel_terms_the_whole_group_then_kills(tau: Tau, tmp_path: Path) -> None:
    marker = tmp_path / "got-term"
    child_pid = tmp_path / "child.pid"
    script = (
        "import os, signal, subprocess, sys, time\n"
        f"c = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(child_pid)!r}, 'w').write(str(c.pid))\n"
        f"signal.signal(signal.SIGTERM, lambda *a: open({str(marker)!r}, 'w').write('t'))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.05)\n"  # ignores TERM after noting it: needs SIGKILL
    )
    sub = tau(
        "run", "--name", "stubborn", "--set", "stop_grace=1s", "--", PY, "-c", script, check=True
    )
    assert "stubborn-" in sub.stdout
    tau.wait_state("stubborn", {"RUNNING"})
    deadline = time.monotonic() + 10
    while not child_pid.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    res = tau("cancel", "stubborn", check=True)
    assert "CANCELLED" in res.stdout
    assert time.monotonic() - t0 >= 1.0  # waited stop_grace before SIGKILL
    assert marker.read_text() == "t"
    pid = int(child_pid.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the workload's child survived the cancel"
    data = tau.json("status", "stubborn")
    assert data["state"] == "CANCELLED" and data["reason"] == "Cancelled"
    again = tau("cancel", "stubborn")
    assert again.returncode == 7 and "already CANCELLED" in again.stderr


def test_cancel_queued_run_never_starts(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "1")
    tau("run", "--name", "holder", "--gpus", "1", "--", "sleep", "30", check=True)
    tau.wait_state("holder", {"RUNNING"})
    ran = tmp_path / "ran"
    tau("run", "--name", "waiter", "--gpus", "1", "--", "touch", str(ran), check=True)
    assert tau.json("status", "waiter")["state"] == "QUEUED"
    assert "CANCELLED" in tau("cancel", "waiter", check=True).stdout
    tau("cancel", "holder", check=True)
    time.sleep(0.5)
    assert not ran.exists()
    assert tau.json("status", "waiter")["attempts"] == 0


def test_list_filters(tau: Tau) -> None:
    tau("run", "--wait", "--name", "ok", "--", "true", check=True)
    tau("run", "--wait", "--name", "bad", "--", "false")
    failed = tau.json("list", "--state", "failed")["runs"]
    assert [r["name"] for r in failed] == ["bad"]
    assert [r["name"] for r in tau.json("list", "--name", "ok")["runs"]] == ["ok"]
    assert len(tau.json("list", "--since", "1h")["runs"]) == 2
    assert tau.json("list", "--limit", "1")["runs"][0]["name"] == "bad"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
