"""TAU_RESUME_BEFORE: where the server cannot see the checkpoints (a cluster volume), the
SDK leaves out those written after a hardware fault, as the server would (the server's
side: tests/unit/server/test_launch_request.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from taugrid.sdk.checkpoint import latest, saving


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
