"""Automatic restarts from the last good checkpoint, `tau resume`, and file housekeeping,
through the real CLI, server, supervisors and SDK."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from tauproc import Tau, write_spec

PY = sys.executable

# Saves three checkpoints (one per step) from where the last good one left off, logs a
# metric per step, then fails as its mode says.
WORKLOAD = """\
import os, sys, pathlib, taugrid
attempt = int(os.environ["TAU_ATTEMPT"])
ck = taugrid.checkpoint.latest()
start = ck.step + 1 if ck else 0
print(f"attempt={attempt} resume_from={os.environ.get('TAU_RESUME_FROM')} start={start}",
      flush=True)
for step in range(start, start + 3):
    with taugrid.checkpoint.saving(step) as d:
        (d / "state.txt").write_text(str(step))
    taugrid.log(step=step, loss=1.0 / (step + 1))
mode = sys.argv[1]
if mode == "fail-twice" and attempt < 2:
    sys.exit(3)
if mode == "corrupt" and attempt == 0:
    root = pathlib.Path(os.environ["TAU_CHECKPOINT_DIR"])
    newest = sorted(root.glob("step-*"))[-1]
    (newest / "state.txt").write_text("torn")
    sys.exit(1)
if mode == "corrupt-all" and attempt == 0:
    for d in pathlib.Path(os.environ["TAU_CHECKPOINT_DIR"]).glob("step-*"):
        (d / "state.txt").write_text("torn")
    sys.exit(1)
if mode == "fail-once" and attempt == 0:
    sys.exit(2)
"""


def _project(tau: Tau, mode: str, restart: str, extra: str = "") -> Path:
    proj = tau.cwd / f"proj-{mode}"
    proj.mkdir(parents=True, exist_ok=True)
    (proj / "work.py").write_text(WORKLOAD)
    write_spec(
        proj,
        f"name: {mode}\ncommand: [{json.dumps(PY)}, work.py, {mode}]\nrestart: {restart}\n{extra}",
    )
    return proj


def _run(tau: Tau, proj: Path, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = tau.json("run", *args, cwd=proj)["run"]
    return out


def _logs(tau: Tau, run_id: str, attempt: int) -> str:
    return tau("logs", run_id, "--attempt", str(attempt), check=True).stdout


def test_failures_restart_from_the_newest_checkpoint(tau: Tau) -> None:
    proj = _project(tau, "fail-twice", "{max: 3, on: [error], backoff: 0s}")
    run = _run(tau, proj)
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED"}, timeout=60)
    assert done["state"] == "SUCCEEDED", done["events"]
    assert done["attempts"] == 3 and done["restarts"] == 2
    atts = done["attempt_list"]
    assert [(a["reason"], a["failure_class"], a["exit_code"]) for a in atts] == [
        ("ExitCode", "exit_code", 3),
        ("ExitCode", "exit_code", 3),
        ("Completed", None, 0),
    ]
    assert atts[0]["resumed_from"] is None
    assert [a["resumed_from"]["step"] for a in atts[1:]] == [2, 5]
    assert "start=0" in _logs(tau, run["id"], 0)
    assert "start=3" in _logs(tau, run["id"], 1)
    assert "start=6" in _logs(tau, run["id"], 2)
    assert "step-0000000005" in _logs(tau, run["id"], 2)
    flow = [(e["to_state"], e["reason"]) for e in done["events"]]
    assert flow.count(("RESTARTING", "ExitCode")) == 2
    assert flow.count(("QUEUED", "Restarting")) == 2
    restarting = [e["message"] for e in done["events"] if e["to_state"] == "RESTARTING"]
    assert restarting == [
        "exited with code 3; restart 1 of 3 in 0s",
        "exited with code 3; restart 2 of 3 in 0s",
    ]
    # keep: 3 (the default) pruned older checkpoints; metrics cover every attempt.
    assert [c["step"] for c in done["checkpoints"]] == [8, 7, 6]
    assert all(c["verified"] for c in done["checkpoints"])
    assert done["metrics_last"]["step"] == 8
    assert done["metrics_last"]["values"]["loss"] == 1.0 / 9
    assert done["restart_policy"] == {
        "max": 3,
        "on": ["error"],
        "backoff_s": 0.0,
        "used": 2,
        "next_at": None,
    }


def test_a_corrupt_newest_checkpoint_is_skipped_with_an_event(tau: Tau) -> None:
    proj = _project(tau, "corrupt", "{max: 1, backoff: 0s}")
    run = _run(tau, proj)
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED"}, timeout=60)
    assert done["state"] == "SUCCEEDED", done["events"]
    skipped = [e for e in done["events"] if e["reason"] == "CheckpointSkipped"]
    assert len(skipped) == 1
    assert "checkpoint step 2 skipped for attempt 1" in skipped[0]["message"]
    assert "sha256" in skipped[0]["message"] or "size" in skipped[0]["message"]
    assert done["attempt_list"][1]["resumed_from"]["step"] == 1
    assert "start=2" in _logs(tau, run["id"], 1)


def test_when_every_checkpoint_is_corrupt_the_restart_starts_fresh(tau: Tau) -> None:
    proj = _project(tau, "corrupt-all", "{max: 1, backoff: 0s}")
    done = tau.wait_state(_run(tau, proj)["id"], {"SUCCEEDED", "FAILED"}, timeout=60)
    assert done["state"] == "SUCCEEDED", done["events"]
    skipped = [e for e in done["events"] if e["reason"] == "CheckpointSkipped"]
    assert [e["message"].split(" skipped")[0] for e in skipped] == [
        "checkpoint step 2",
        "checkpoint step 1",
        "checkpoint step 0",
    ]
    assert done["attempt_list"][1]["resumed_from"] is None
    # TAU_RESUME_FROM is set but empty, so the SDK does not pick a corrupt one up itself.
    assert "resume_from= start=0" in _logs(tau, done["id"], 1)


def test_command_not_found_fails_fast_without_restarts(tau: Tau) -> None:
    write_spec(tau.cwd, "name: typo\ncommand: no-such-command-xyz\nrestart: {max: 3}\n")
    run = tau.json("run")["run"]
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED"}, timeout=30)
    assert done["state"] == "FAILED" and done["attempts"] == 1
    assert done["reason"] == "StartFailed"
    assert "exited with code 127: command not found" in done["message"]
    assert done["attempt_list"][0]["failure_class"] == "start_failed"


def test_out_of_restarts_says_so(tau: Tau) -> None:
    proj = _project(tau, "fail-twice", "{max: 1, backoff: 0s}")
    done = tau.wait_state(_run(tau, proj)["id"], {"SUCCEEDED", "FAILED"}, timeout=60)
    assert done["state"] == "FAILED" and done["attempts"] == 2
    assert done["message"] == "exited with code 3; all 1 restarts used"


def test_resume_a_failed_run_from_its_checkpoint(tau: Tau) -> None:
    proj = _project(tau, "fail-once", "{max: 0}")
    run = _run(tau, proj)
    failed = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED"}, timeout=30)
    assert failed["state"] == "FAILED" and failed["attempts"] == 1
    # The workdir (a copy of the snapshot) is gone; logs and checkpoints stay.
    assert not (tau.home / "runs" / run["id"] / "workdir").exists()
    assert "start=0" in _logs(tau, run["id"], 0)

    tau("resume", run["id"], check=True)
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED"}, timeout=30)
    assert done["state"] == "SUCCEEDED" and done["attempts"] == 2
    assert done["attempt_list"][1]["resumed_from"]["step"] == 2
    assert "start=3" in _logs(tau, run["id"], 1)
    resumed_events = [e for e in done["events"] if e["reason"] == "Resumed"]
    assert len(resumed_events) == 1
    assert resumed_events[0]["from_state"] == "FAILED"
    assert "starts from checkpoint step 2" in resumed_events[0]["message"]
    # A run that is not finished cannot be resumed.
    sleeper = tau.json("run", "--", "sleep", "30")["run"]
    proc = tau("resume", sleeper["id"])
    assert proc.returncode == 7 and "only a finished run can be resumed" in proc.stderr
    tau("cancel", sleeper["id"], check=True)


def test_server_killed_during_restarts_loses_and_duplicates_no_attempt(tau: Tau) -> None:
    proj = _project(tau, "fail-twice", "{max: 3, on: [error], backoff: 2s}")
    run = _run(tau, proj)
    tau.wait_state(run["id"], {"RESTARTING"}, timeout=30)
    tau.kill_server()
    time.sleep(0.5)
    tau.start_server()
    done = tau.wait_state(run["id"], {"SUCCEEDED", "FAILED"}, timeout=60)
    assert done["state"] == "SUCCEEDED"
    assert [a["attempt"] for a in done["attempt_list"]] == [0, 1, 2]
    restarts = [e for e in done["events"] if e["to_state"] == "RESTARTING"]
    assert [e["message"].split("; ")[1] for e in restarts] == [
        "restart 1 of 3 in 2s",
        "restart 2 of 3 in 4s",
    ]
    assert "start=6" in _logs(tau, run["id"], 2)


def test_local_mode_refuses_multi_node_and_ray(tau: Tau) -> None:
    write_spec(tau.cwd, "name: multi\ncommand: echo\nnodes: 9\n")
    proc = tau("run")
    assert proc.returncode == 2 and "local mode runs at most 8 nodes" in proc.stderr
    write_spec(tau.cwd, "name: ray\ncommand: echo\nlauncher: ray\nnodes: 2\n", "ray.yaml")
    proc = tau("run", "ray.yaml")
    assert proc.returncode == 2 and "launcher: ray runs a single-node Ray cluster" in proc.stderr
    assert tau.json("list")["runs"] == []


def test_retention_removes_files_but_keeps_the_record(tau: Tau) -> None:
    run = tau.json("run", "--", "sh", "-c", "echo kept-in-log")["run"]
    tau.wait_state(run["id"], {"SUCCEEDED"})
    assert "kept-in-log" in tau("logs", run["id"], check=True).stdout
    tau.stop_server()
    time.sleep(1.2)
    tau.start_server("--retention", "1s")
    deadline = time.monotonic() + 15
    while (tau.home / "runs" / run["id"]).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (tau.home / "runs" / run["id"]).exists()
    rec = tau.json("status", run["id"])
    assert rec["state"] == "SUCCEEDED"
    assert rec["events"][-1]["reason"] == "FilesRemoved"
