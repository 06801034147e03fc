"""What pods report, as the server keeps it (executors.kubernetes.reported): metrics grow
only at their end by offset, the newest attempt's checkpoint list stands, and the resume
point is the SDK's walk over what the pod verified."""

from __future__ import annotations

from pathlib import Path

import pytest

from taugrid.errors import UsageError
from taugrid.executors.kubernetes.reported import ReportedFiles
from taugrid.ports.executor import AttemptKey
from taugrid.ports.pod_reports import OffsetAhead, ReportedCheckpoint
from taugrid.sdk._store import FileEntry, Manifest

K0 = AttemptKey("train-x7k2p", 0)
K1 = AttemptKey("train-x7k2p", 1)


def files(tmp_path: Path) -> ReportedFiles:
    return ReportedFiles(tmp_path / "reports", "/tau/run/checkpoints")


def manifest(step: int, at: float) -> str:
    entry = FileEntry("w.bin", 3, "a" * 64)
    return Manifest(step, at, 0, "train-x7k2p", (entry,), 3).to_json().decode()


def test_metrics_grow_only_at_their_end_whatever_is_resent(tmp_path: Path) -> None:
    rf = files(tmp_path)
    assert rf.append_metrics(K0, 0, b"") == 0
    assert rf.append_metrics(K0, 0, b"a\n") == 2
    assert rf.append_metrics(K0, 0, b"a\nb\n") == 4  # a resend overlapping the end
    assert rf.append_metrics(K0, 2, b"b\n") == 4  # a resend of what is there
    with pytest.raises(OffsetAhead) as ahead:
        rf.append_metrics(K0, 9, b"z\n")
    assert ahead.value.size == 4 and ahead.value.to_dict()["size"] == 4
    assert rf.read_metrics(K0, 0, 100) == b"a\nb\n"
    assert rf.read_metrics(K0, 2, 1) == b"b"
    assert rf.read_metrics(K1, 0, 100) == b""


def test_names_that_are_no_run_are_refused_before_any_path(tmp_path: Path) -> None:
    rf = files(tmp_path)
    for bad in ("../etc", "A", "a/b", ""):
        with pytest.raises(UsageError):
            rf.append_metrics(AttemptKey(bad, 0), 0, b"x\n")
    with pytest.raises(UsageError):
        rf.append_metrics(AttemptKey("ok", -1), 0, b"x\n")
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())


def test_the_resume_point_skips_what_the_pod_found_damaged_or_written_after_a_fault(
    tmp_path: Path,
) -> None:
    rf = files(tmp_path)
    rf.put_checkpoints(
        K1,
        [
            ReportedCheckpoint(2, manifest(2, 100.0), None),
            ReportedCheckpoint(4, manifest(4, 300.0), None),
            ReportedCheckpoint(3, manifest(3, 200.0), "w.bin: sha256 mismatch"),
            ReportedCheckpoint(5, None, "missing manifest tau-checkpoint.json"),
        ],
    )
    assert [c.step for c in rf.checkpoints(K0.run_id)] == [5, 4, 3, 2]
    chosen, skipped = rf.resume_point(K0.run_id)
    assert chosen is not None and chosen.step == 4
    assert str(chosen.path) == "/tau/run/checkpoints/step-0000000004"
    assert [s.step for s in skipped] == [5]
    chosen, skipped = rf.resume_point(K0.run_id, fault_at=250.0)
    assert chosen is not None and chosen.step == 2
    assert [s.step for s in skipped] == [5, 4, 3]
    assert "after the hardware fault" in (skipped[1].problem or "")
    assert "sha256" in (skipped[2].problem or "")
    # A manifest that names another step is not that step's.
    rf.put_checkpoints(K1, [ReportedCheckpoint(7, manifest(6, 1.0), None)])
    (only,) = rf.checkpoints(K0.run_id)
    assert not only.verified and "does not match" in (only.problem or "")


def test_a_late_report_from_an_earlier_attempt_changes_nothing(tmp_path: Path) -> None:
    rf = files(tmp_path)
    rf.put_checkpoints(K1, [ReportedCheckpoint(2, manifest(2, 1.0), None)])
    rf.put_checkpoints(K0, [])  # attempt 0's sidecar, after attempt 1 began
    assert [c.step for c in rf.checkpoints(K0.run_id)] == [2]
    assert rf.remove_run(K0.run_id) and not rf.remove_run(K0.run_id)
    assert rf.checkpoints(K0.run_id) == []
