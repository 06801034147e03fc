"""`kill -9` of a workload in the middle of checkpoint writes, 20 times in a row, through
the real server, supervisor, restart policy and SDK: every attempt resumes from a
complete, verified checkpoint and continues from its step."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tauproc import Tau, write_spec

from taugrid.sdk.checkpoint import verify

KILLS = 20

# Writes 4 MiB checkpoints back to back (most of its time is inside a checkpoint write),
# and records each attempt's first step, resume point and what it found there.
WORKLOAD = """\
import json, os, taugrid
ck = taugrid.checkpoint.latest()
start = ck.step + 1 if ck else 0
if ck:
    assert (ck.path / "state.bin").read_bytes() == bytes([ck.step % 251]) * (4 << 20)
with open(os.path.join(os.environ["TAU_OUTPUT_DIR"], "attempts.jsonl"), "a") as f:
    f.write(json.dumps({"attempt": int(os.environ["TAU_ATTEMPT"]), "pid": os.getpid(),
                        "start": start, "resume_from": os.environ.get("TAU_RESUME_FROM")})
            + "\\n")
step = start
while True:
    with taugrid.checkpoint.saving(step) as d:
        (d / "state.bin").write_bytes(bytes([step % 251]) * (4 << 20))
    step += 1
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except FileNotFoundError:
        return []


def _wait_lines(path: Path, n: int, timeout: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(lines := _lines(path)) >= n:
            return lines
        time.sleep(0.01)
    raise AssertionError(f"attempt {n - 1} never started: {_lines(path)}")


def test_kill_9_during_checkpoint_writes_20_times(tau: Tau) -> None:
    (tau.cwd / "work.py").write_text(WORKLOAD)
    write_spec(
        tau.cwd,
        f"name: killme\ncommand: [{json.dumps(sys.executable)}, work.py]\n"
        f"restart: {{max: {KILLS + 2}, on: [error], backoff: 0s}}\ncheckpoint: {{keep: 2}}\n",
    )
    run = tau.json("run")["run"]
    marks = tau.home / "runs" / run["id"] / "outputs" / "attempts.jsonl"
    ckpt_root = tau.home / "runs" / run["id"] / "checkpoints"
    rng = random.Random(7)
    for k in range(KILLS):
        line = _wait_lines(marks, k + 1)[k]
        # Let it get some checkpoints in, then kill it wherever it is.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not list(ckpt_root.glob("step-*")):
            time.sleep(0.01)
        time.sleep(rng.uniform(0.05, 0.25))
        os.kill(line["pid"], signal.SIGKILL)
    lines = _wait_lines(marks, KILLS + 1)
    tau("cancel", run["id"], check=True)
    done = tau.wait_state(run["id"], {"CANCELLED", "FAILED", "SUCCEEDED"})

    assert done["state"] == "CANCELLED"
    assert [x["attempt"] for x in lines] == list(range(KILLS + 1))
    assert lines[0]["start"] == 0 and lines[0]["resume_from"] is None
    prev_start = 0
    for x, att in zip(lines[1:], done["attempt_list"][1:], strict=False):
        # Each resume got a checkpoint that verified, and continued right after it.
        assert x["resume_from"], x
        step = int(Path(x["resume_from"]).name.split("-")[1])
        # (A kill before the next checkpoint completed resumes from the same one again.)
        assert x["start"] == step + 1 and x["start"] >= prev_start
        assert att["resumed_from"]["step"] == step
        prev_start = x["start"]
    # kill -9 is a signal, not an OOM (OOMKilled is said only when the kernel says so)
    assert [a["failure_class"] for a in done["attempt_list"][:KILLS]] == ["signal"] * KILLS
    # Whatever is on disk now is complete or absent: no step-* directory is partial.
    for d in ckpt_root.glob("step-*"):
        assert verify(d) is None, d
