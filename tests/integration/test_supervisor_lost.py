"""A supervisor killed with ``kill -9``: its workload must not outlive it unseen.

Issue 9: the run was marked Lost within a second while the workload kept running, its GPU
was handed to the next run (two processes on GPU 0), and `tau cancel` answered 409. Now
the workload's main process dies with its supervisor, the server finds and stops what is
left (a grandchild in a session of its own), and the run keeps its GPU until every
process of it is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tauproc import Tau

from servicecheck import require_service

PY = sys.executable

# Run A: a child in a session of its own (as torchrun starts its workers), then sleep.
HOLDER = (
    "import json, subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
    " start_new_session=True)\n"
    "import os\n"
    "json.dump({'main': os.getpid(), 'child': c.pid}, open(sys.argv[1] + '.tmp', 'w'))\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "time.sleep(120)\n"
)
# Run B: which of A's processes are alive when B starts on the GPU.
CHECKER = (
    "import json, os, sys, time\n"
    "pids = json.load(open(sys.argv[1]))\n"
    "def alive(p):\n"
    "    try:\n"
    "        return open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0] not in 'ZX'\n"
    "    except OSError:\n"
    "        return False\n"
    "json.dump({'alive': [p for p in pids.values() if alive(p)], 'at': time.time(),"
    " 'gpus': os.environ.get('CUDA_VISIBLE_DEVICES')}, open(sys.argv[2], 'w'))\n"
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _start_holder(tau: Tau, tmp_path: Path) -> tuple[str, dict[str, int]]:
    pids_file = tmp_path / "a-pids.json"
    (tau.cwd / "holder.py").write_text(HOLDER)
    (tau.cwd / "checker.py").write_text(CHECKER)
    rid = tau.json("run", "--name", "holder", "--gpus", "1", "--", PY, "holder.py", str(pids_file))[
        "run"
    ]["id"]
    tau.wait_state(rid, {"RUNNING"})
    _wait(pids_file.exists, 15, "run A's processes")
    return rid, json.loads(pids_file.read_text())


def _kill_supervisor(tau: Tau, rid: str) -> None:
    spid = int((tau.home / "runs" / rid / "attempts" / "0" / "supervisor.pid").read_text())
    os.kill(spid, signal.SIGKILL)


def _events(tau: Tau, rid: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = tau.json("status", rid)["events"]
    return events


def test_killed_supervisor_leaves_no_process_and_holds_its_gpu(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "1")
    a, pids = _start_holder(tau, tmp_path)
    result = tmp_path / "b.json"
    b = tau.json(
        "run", "--name", "checker", "--gpus", "1", "--", PY, "checker.py",
        str(tmp_path / "a-pids.json"), str(result),
    )["run"]["id"]  # fmt: skip
    assert tau.json("status", b)["state"] == "QUEUED"  # A holds the only GPU
    try:
        _kill_supervisor(tau, a)
        done = tau.wait_state(a, {"FAILED", "SUCCEEDED", "CANCELLED"}, timeout=20)
        assert (done["state"], done["reason"]) == ("FAILED", "Lost")
        # Every process of A is gone: the main one died with its supervisor, the
        # grandchild in its own session was found by its environment and stopped.
        for pid in pids.values():
            _wait(lambda pid=pid: not _alive(pid), 5, f"A's process {pid} to be gone")
        assert "leftover process" in done["message"]
        why = [e for e in _events(tau, a) if e["reason"] == "SupervisorLost"]
        assert len(why) == 1 and "stopping 1 leftover process" in why[0]["message"]
        assert str(pids["child"]) in why[0]["message"]

        tau.wait_state(b, {"SUCCEEDED"}, timeout=20)
        seen = json.loads(result.read_text())
        assert seen["alive"] == []  # never two runs' processes on GPU 0
        assert seen["gpus"] == "0"
        assert seen["at"] >= done["finished_at"]
        # After it is Lost, there is nothing left to cancel.
        again = tau("cancel", a)
        assert again.returncode == 7, again.stderr
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[Path]:
    """``pid`` in a frozen v1 freezer cgroup: a SIGKILL stays pending until it is thawed,
    so the server sees a leftover process that does not go away at once."""
    root = Path("/sys/fs/cgroup/freezer")
    require_service(
        os.geteuid() == 0 and (root / "cgroup.procs").exists(),
        "a cgroup v1 freezer (root) to hold a process that a SIGKILL cannot end at once",
    )
    cg = root / f"tau-test-{os.getpid()}-{pid}"
    cg.mkdir()
    try:
        (cg / "cgroup.procs").write_text(str(pid))
        (cg / "freezer.state").write_text("FROZEN")
        yield cg
    finally:
        (cg / "freezer.state").write_text("THAWED")
        if _alive(pid):  # out of the cgroup, or it cannot be removed
            with contextlib.suppress(OSError):
                (root / "cgroup.procs").write_text(str(pid))
        deadline = time.monotonic() + 5
        while True:
            try:
                cg.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def test_cancel_while_leftovers_are_being_stopped(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "1")
    a, pids = _start_holder(tau, tmp_path)
    b = tau.json("run", "--name", "next", "--gpus", "1", "--", "true")["run"]["id"]
    try:
        with frozen(pids["child"]) as cg:
            _kill_supervisor(tau, a)
            _wait(
                lambda: any(e["reason"] == "SupervisorLost" for e in _events(tau, a)),
                15,
                "the server to notice the lost supervisor",
            )
            time.sleep(1.0)  # several engine passes: the leftover is still there
            assert tau.json("status", a)["state"] == "RUNNING"  # still holds GPU 0
            assert tau.json("status", b)["state"] == "QUEUED"
            cancel = tau("cancel", a, "--no-wait")
            assert cancel.returncode == 0, cancel.stderr  # active, not 409
            assert (cg / "freezer.state").read_text().strip() == "FROZEN"
        done = tau.wait_state(a, {"CANCELLED", "FAILED"}, timeout=15)
        assert done["state"] == "CANCELLED", done
        assert "supervisor had vanished" in done["message"]
        assert not _alive(pids["child"])
        tau.wait_state(b, {"SUCCEEDED"}, timeout=20)
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_sigkill_of_the_workload_is_reported_as_a_signal(tau: Tau) -> None:
    rid = tau.json("run", "--name", "killed", "--", "sleep", "60")["run"]["id"]
    tau.wait_state(rid, {"RUNNING"})
    status = json.loads((tau.home / "runs" / rid / "attempts" / "0" / "status.json").read_text())
    os.kill(status["pid"], signal.SIGKILL)
    done = tau.wait_state(rid, {"FAILED"}, timeout=15)
    assert done["reason"] == "ExitCode" and done["message"] == "killed by signal 9 (SIGKILL)"
    assert done["attempt_list"][0]["failure_class"] == "signal"
