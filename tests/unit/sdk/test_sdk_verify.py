"""verify(), list_checkpoints() and newest_verified(): the read side the server uses."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from taugrid.sdk import checkpoint as ck


def save(root: Path, step: int, files: dict[str, bytes] | None = None) -> Path:
    with ck.saving(step, root=root) as d:
        for rel, data in (files or {"a.bin": b"alpha", "b.bin": b"bravo!"}).items():
            (d / rel).write_bytes(data)
    return root / f"step-{step:010d}"


def edit_manifest(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    m = path / "tau-checkpoint.json"
    doc = json.loads(m.read_text())
    change(doc)
    m.write_text(json.dumps(doc))


def test_intact_checkpoint_verifies(tmp_path: Path) -> None:
    p = save(tmp_path, 1)
    assert ck.verify(p) is None
    assert ck.verify(str(p), full=False) is None


def test_missing_manifest(tmp_path: Path) -> None:
    p = save(tmp_path, 1)
    (p / "tau-checkpoint.json").unlink()
    assert ck.verify(p) == "missing manifest tau-checkpoint.json"


def test_missing_directory_and_not_a_directory(tmp_path: Path) -> None:
    assert "does not exist" in (ck.verify(tmp_path / "nope") or "")
    f = tmp_path / "file"
    f.write_text("x")
    assert "not a directory" in (ck.verify(f) or "")


def test_bad_json(tmp_path: Path) -> None:
    p = save(tmp_path, 1)
    (p / "tau-checkpoint.json").write_text('{"format": 1, "st')
    problem = ck.verify(p)
    assert problem is not None and problem.startswith(
        "manifest tau-checkpoint.json is not valid JSON"
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(format=2), "unsupported format 2"),
        (lambda d: d.update(step="1"), "step '1' is not a non-negative integer"),
        (lambda d: d.update(time=None), "time None is not a number"),
        (lambda d: d.update(attempt="0"), "attempt '0' is not an integer"),
        (lambda d: d.update(files={}), "'files' is not a list"),
        (lambda d: d["files"][0].update(path="../escape"), "must not contain"),
        (lambda d: d["files"][0].update(path="/abs"), "must be relative"),
        (lambda d: d["files"][0].update(size=-1), "size of file a.bin"),
        (lambda d: d["files"][0].update(sha256="XYZ"), "sha256 of file a.bin"),
        (lambda d: d["files"].append(dict(d["files"][0])), "listed twice"),
        (lambda d: d.update(total_size=1), "total_size 1 is not the sum"),
    ],
)
def test_malformed_manifest(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    p = save(tmp_path, 1)
    edit_manifest(p, change)
    problem = ck.verify(p)
    assert problem is not None
    assert problem.startswith("manifest tau-checkpoint.json is malformed: ")
    assert expected in problem


def test_manifest_that_is_not_an_object(tmp_path: Path) -> None:
    p = save(tmp_path, 1)
    (p / "tau-checkpoint.json").write_text("[1, 2]")
    assert "not a JSON object" in (ck.verify(p) or "")


def test_size_mismatch_names_the_file(tmp_path: Path) -> None:
    p = save(tmp_path, 1)
    (p / "b.bin").write_bytes(b"bravo")
    assert ck.verify(p) == "size mismatch of file b.bin: manifest says 6 bytes, found 5"
    assert ck.verify(p, full=False) == ck.verify(p)


def test_sha256_mismatch_names_the_file_and_needs_full(tmp_path: Path) -> None:
    p = save(tmp_path, 1)
    (p / "b.bin").write_bytes(b"BRAVO!")
    assert ck.verify(p) == "sha256 mismatch of file b.bin"
    assert ck.verify(p, full=False) is None


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    p = save(tmp_path, 1)
    (p / "a.bin").unlink()
    assert ck.verify(p) == "missing file a.bin"


def test_file_replaced_by_a_directory(tmp_path: Path) -> None:
    p = save(tmp_path, 1)
    (p / "a.bin").unlink()
    (p / "a.bin").mkdir()
    assert ck.verify(p) == "file a.bin is not a regular file"


def test_step_must_match_the_directory_name(tmp_path: Path) -> None:
    p = save(tmp_path, 1)
    moved = tmp_path / "step-0000000002"
    os.rename(p, moved)
    assert ck.verify(moved) == "manifest step 1 does not match the directory name step-0000000002"
    other = tmp_path / "elsewhere"
    os.rename(moved, other)  # any other name: the manifest alone counts
    assert ck.verify(other) is None


def test_big_checkpoint_hashed_in_parallel_catches_a_flip(tmp_path: Path) -> None:
    files = {f"part{i}.bin": os.urandom(24 << 20) for i in range(4)}  # > 64 MiB: threads
    p = save(tmp_path, 1, files)
    assert ck.verify(p) is None
    with open(p / "part2.bin", "r+b") as f:
        f.seek(17 << 20)
        byte = f.read(1)
        f.seek(17 << 20)
        f.write(bytes([byte[0] ^ 1]))
    assert ck.verify(p) == "sha256 mismatch of file part2.bin"


# -- list_checkpoints ------------------------------------------------------------------------
def test_list_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAU_CHECKPOINT_KEEP", "10")
    monkeypatch.setenv("TAU_ATTEMPT", "1")
    assert ck.list_checkpoints(tmp_path / "missing") == []
    for step in (1, 5, 3):
        save(tmp_path, step)
    (tmp_path / "step-0000000003" / "a.bin").write_bytes(b"ALPHA")  # same size: full only
    (tmp_path / "step-0000000005" / "tau-checkpoint.json").unlink()
    (tmp_path / "step-7").mkdir()  # not canonical: ignored
    (tmp_path / ".tmp-step-0000000009-1-0000000000000000").mkdir()  # temporary: ignored
    (tmp_path / "step-0000000008").write_text("a file")  # not a directory: ignored
    infos = ck.list_checkpoints(tmp_path)
    assert [i.step for i in infos] == [5, 3, 1]
    five, three, one = infos
    assert (five.verified, five.problem, five.time, five.file_count) == (
        False,
        "missing manifest tau-checkpoint.json",
        None,
        0,
    )
    assert three.verified and three.problem is None  # sizes only by default
    assert (one.verified, one.size, one.file_count, one.attempt) == (True, 11, 2, 1)
    assert [f.path for f in one.files] == ["a.bin", "b.bin"]
    assert one.path == tmp_path / "step-0000000001"
    full = ck.list_checkpoints(tmp_path, full=True)
    assert full[1].problem == "sha256 mismatch of file a.bin" and not full[1].verified
    monkeypatch.setenv("TAU_CHECKPOINT_DIR", str(tmp_path))
    assert [i.step for i in ck.list_checkpoints()] == [5, 3, 1]


# -- newest_verified -------------------------------------------------------------------------
def test_newest_verified_skips_corrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAU_CHECKPOINT_KEEP", "10")
    for step in (1, 2, 3, 4):
        save(tmp_path, step)
    (tmp_path / "step-0000000004" / "a.bin").write_bytes(b"ALPHA")
    (tmp_path / "step-0000000003" / "b.bin").unlink()
    best, skipped = ck.newest_verified(tmp_path)
    assert best is not None and best.step == 2 and best.verified
    assert [(s.step, s.problem) for s in skipped] == [
        (4, "sha256 mismatch of file a.bin"),
        (3, "missing file b.bin"),
    ]
    quick, quick_skipped = ck.newest_verified(tmp_path, full=False)
    assert quick is not None and quick.step == 4 and quick_skipped == []  # sizes only


def test_newest_verified_excludes_checkpoints_written_after_a_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAU_CHECKPOINT_KEEP", "10")
    for step, at in ((1, 1000.0), (2, 2000.0), (3, 3000.0)):
        p = save(tmp_path, step)
        edit_manifest(p, lambda d, at=at: d.update(time=at))  # time is not hashed
    best, skipped = ck.newest_verified(tmp_path, exclude_written_after=1500.0)
    assert best is not None and (best.step, best.time) == (1, 1000.0)
    assert [s.step for s in skipped] == [3, 2]
    assert all("after the hardware fault" in (s.problem or "") for s in skipped)
    assert all(s.verified for s in skipped)  # intact, just too late
    none, all_skipped = ck.newest_verified(tmp_path, exclude_written_after=500.0)
    assert none is None and len(all_skipped) == 3
    assert ck.newest_verified(tmp_path / "missing") == (None, [])


def test_checkpoint_info_converts_to_checkpoint(tmp_path: Path) -> None:
    save(tmp_path, 4)
    info, _ = ck.newest_verified(tmp_path)
    assert info is not None
    c = info.to_checkpoint()
    assert (c.path, c.step, c.size, c.files) == (info.path, 4, 11, info.files)
