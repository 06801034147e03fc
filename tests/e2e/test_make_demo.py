"""The README's first command, end to end: `make demo` runs the quickstart for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TAU = [sys.executable, "-m", "taugrid.cli.main"]


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_make_demo_runs_the_quickstart(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAU_")}
    env["TAU_HOME"] = str(tmp_path / "home")
    env["TAU_CONFIG"] = str(tmp_path / "tau-config.yaml")  # not the developer's contexts
    try:
        demo = subprocess.run(
            ["make", "-s", "demo"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        out = demo.stdout + demo.stderr
        assert "SUCCEEDED" in out
        assert "saved model to" in out  # `tau logs quickstart --tail 5` printed the end

        got = subprocess.run(
            [*TAU, "get", "quickstart", "-d", str(tmp_path / "out")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert got.returncode == 0, got.stderr
        metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
        assert metrics["val_acc"] > 0.8 and metrics["epochs"] == 20
        assert (tmp_path / "out" / "model.npz").stat().st_size > 0
    finally:
        info = tmp_path / "home" / "server.json"
        if info.exists():
            os.kill(json.loads(info.read_text())["pid"], signal.SIGTERM)
