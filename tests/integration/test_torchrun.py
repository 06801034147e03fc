"""`launcher: torchrun` through the real server: two DDP processes on CPU (gloo), and the
restart policy applies to the whole gang: kill -9 of torchrun stops every worker, and the
next attempt resumes from the last checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from tauproc import Tau

from servicecheck import require_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pytorch-ddp-resume"


def _workers_of(attempt_dir: Path) -> list[int]:
    """Pids whose command line runs train.py from this run's workdir."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
                cwd = os.readlink(f"/proc/{name}/cwd")
            except OSError:
                continue
            if b"train.py" in cmd and cwd.startswith(str(attempt_dir.parent.parent)):
                pids.append(int(name))
    return pids


@pytest.mark.timeout(240)
def test_torchrun_gang_restarts_from_its_checkpoint(tau: Tau) -> None:
    require_module("torch", "torch is not installed (make test installs the torch extra)")
    proj = tau.cwd / "ddp"
    shutil.copytree(EXAMPLE, proj)
    command = f"{sys.executable} train.py --steps 40 --ckpt-every 5"
    run = tau.json("run", "--set", f"command={command}", cwd=proj)["run"]
    rid = run["id"]
    run_dir = tau.home / "runs" / rid
    deadline = time.monotonic() + 120
    while not list((run_dir / "checkpoints").glob("step-*")):
        assert time.monotonic() < deadline, tau("logs", rid).stdout
        time.sleep(0.2)
    status = json.loads((run_dir / "attempts" / "0" / "status.json").read_text())
    workers = [p for p in _workers_of(run_dir / "workdir") if p != status["pid"]]
    assert len(workers) == 2, workers  # torchrun's two ranks
    os.kill(status["pid"], signal.SIGKILL)  # the launcher dies; its ranks must not linger

    done = tau.wait_state(rid, {"SUCCEEDED", "FAILED"}, timeout=180)
    assert done["state"] == "SUCCEEDED", tau("logs", rid, "--all").stdout
    assert done["attempts"] == 2 and done["restarts"] == 1
    first, second = done["attempt_list"]
    assert first["failure_class"] == "signal"  # a SIGKILL, and the kernel says it was no OOM
    assert second["resumed_from"]["step"] >= 5
    for pid in workers:  # attempt 0's ranks were stopped with their launcher
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    logs = tau("logs", rid, "--all").stdout
    assert "==> attempt 1 (resumed from step" in logs
    assert f"resumed from step {second['resumed_from']['step']}" in logs
    assert "rank 1/2 started (backend gloo)" in logs
    assert "finished at step 40" in logs
    assert (run_dir / "outputs" / "model.pt").exists()
