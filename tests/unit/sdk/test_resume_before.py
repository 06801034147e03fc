"""TAU_RESUME_BEFORE: where the server cannot see the checkpoints (a cluster volume), the
SDK leaves out those written after a hardware fault, as the server would."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from taugrid.ports.artifacts import WorkloadPaths
from taugrid.ports.executor import Placement
from taugrid.sdk.checkpoint import latest, saving
from taugrid.server.launching import launch_request


def test_latest_leaves_out_checkpoints_written_after_the_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("TAU_RESUME_FROM", "TAU_RUN_ID", "TAU_ATTEMPT"):
        monkeypatch.delenv(var, raising=False)
    with saving(1, root=tmp_path) as d:
        (d / "w").write_text("before")
    time.sleep(0.05)
    fault = time.time()
    time.sleep(0.05)
    with saving(2, root=tmp_path) as d:
        (d / "w").write_text("after")
    found = latest(root=tmp_path)
    assert found is not None and found.step == 2
    monkeypatch.setenv("TAU_RESUME_BEFORE", f"{fault:.6f}")
    found = latest(root=tmp_path)
    assert found is not None and found.step == 1
    monkeypatch.setenv("TAU_RESUME_BEFORE", "not a time")
    found = latest(root=tmp_path)
    assert found is not None and found.step == 2  # ignored, never a crash


def test_the_server_sets_it_only_when_it_chose_nothing() -> None:
    run = {
        "id": "r-abcde",
        "name": "r",
        "workspace": "default",
        "spec_resolved": {"command": ["python", "t.py"]},
        "env_summary": {},
        "snapshot_digest": "0" * 64,
    }
    paths = WorkloadPaths("/tau/run/checkpoints", "/tau/run/outputs", "/tau/run/m.jsonl")
    blind = launch_request(run, 1, Placement("x"), paths, None, {}, None, resume_before=12.5)
    assert blind.env["TAU_RESUME_BEFORE"] == "12.500000"
    chose = launch_request(run, 1, Placement("x"), paths, "/c/step-1", {}, None, resume_before=1.0)
    assert "TAU_RESUME_BEFORE" not in chose.env
