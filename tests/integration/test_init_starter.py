"""`tau init` gives a starter that runs as it is, and never replaces the user's script."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tauproc import Tau


def _path_with_venv() -> str:
    # The workload's `python` is the submitter's: this venv, where taugrid is installed.
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}"


def test_starter_runs_as_written(tau: Tau) -> None:
    made = tau("init", check=True)
    assert "train.py" in made.stdout and "tau run --wait" in made.stdout
    assert (tau.cwd / "tau.yaml").exists() and (tau.cwd / "train.py").exists()
    tau("validate", check=True)
    done = tau("run", "--wait", "--set", "env.STEPS=6", PATH=_path_with_venv(), timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tau.json("status", tau.cwd.name)
    assert run["state"] == "SUCCEEDED"
    assert [c["step"] for c in run["checkpoints"]] == [4]  # every 5th step
    logs = tau("logs", run["id"], check=True).stdout
    assert "starting at step 0" in logs and "done: loss 0.5314 after 6 steps" in logs
    metrics = tau.json("metrics", run["id"])["series"]
    assert [p["step"] for p in metrics] == list(range(6))
    got = tau("get", run["id"], "-o", "json", cwd=tau.cwd.parent, check=True)
    assert "result.json" in got.stdout
    assert json.loads((tau.cwd.parent / run["id"] / "result.json").read_text())["step"] == 6


def test_init_keeps_an_existing_train_py(tau: Tau) -> None:
    (tau.cwd / "train.py").write_text("print('mine')\n")
    made = tau("init", check=True)
    assert (tau.cwd / "train.py").read_text() == "print('mine')\n"
    assert "runs your train.py" in made.stdout
