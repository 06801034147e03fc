"""saving(), latest(), pruning, stale temporary directories, write errors."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taugrid.sdk import _writer
from taugrid.sdk import checkpoint as ck


def save(step: int, files: dict[str, bytes], root: Path | None = None) -> Path:
    with ck.saving(step, root=root) as d:
        for rel, data in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
    return (root or Path(os.environ["TAU_CHECKPOINT_DIR"])) / f"step-{step:010d}"


def entries(root: Path) -> list[str]:
    return sorted(os.listdir(root))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- the manifest and the layout -------------------------------------------------------------
def test_manifest_contents(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAU_ATTEMPT", "2")
    monkeypatch.setenv("TAU_RUN_ID", "mnist-abcde")
    files = {"model.bin": os.urandom(5000), "opt/state.bin": b"abc", "empty": b""}
    before = time.time()
    path = save(1234, files)
    after = time.time()
    assert path.name == "step-0000001234"
    assert entries(root) == ["step-0000001234"]  # nothing temporary left
    doc = json.loads((path / "tau-checkpoint.json").read_text())
    assert doc["format"] == 1
    assert doc["step"] == 1234
    assert before <= doc["time"] <= after
    assert doc["attempt"] == 2
    assert doc["run_id"] == "mnist-abcde"
    assert doc["files"] == [
        {"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for rel, data in sorted(files.items())
    ]
    assert doc["total_size"] == sum(len(d) for d in files.values())
    assert ck.verify(path) is None


def test_manifest_without_tau_env_has_nulls(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAU_ATTEMPT", "not-a-number")
    doc = json.loads((save(0, {"a": b"1"}) / "tau-checkpoint.json").read_text())
    assert doc["attempt"] is None and doc["run_id"] is None


def test_saving_yields_an_empty_temporary_sibling(root: Path) -> None:
    with ck.saving(7) as d:
        assert d.parent == root
        assert re.fullmatch(rf"\.tmp-step-0000000007-{os.getpid()}-[0-9a-f]{{16}}", d.name)
        assert list(d.iterdir()) == []
        assert ck.latest() is None  # readers do not see it
        (d / "x").write_bytes(b"x")
    assert not d.exists()
    assert (root / "step-0000000007" / "x").read_bytes() == b"x"


def test_explicit_root_wins_and_missing_root_is_a_runtime_error(tmp_path: Path) -> None:
    with pytest.raises(ck.CheckpointDirNotSet, match="TAU_CHECKPOINT_DIR") as info, ck.saving(1):
        pass
    assert isinstance(info.value, RuntimeError)
    path = save(1, {"a": b"a"}, root=tmp_path / "deep" / "root")
    assert ck.verify(path) is None
    with pytest.raises(ck.CheckpointDirNotSet):
        ck.latest()


@pytest.mark.parametrize("bad", [-1, "3", 2.0, True, None])
def test_step_must_be_a_non_negative_int(root: Path, bad: object) -> None:
    with pytest.raises((TypeError, ValueError)), ck.saving(bad):  # type: ignore[arg-type]
        pass
    assert not root.exists() or entries(root) == []


def test_subdirectories_and_big_steps(root: Path) -> None:
    path = save(12345678901, {"a/b/c.bin": b"deep"})
    assert path.name == "step-12345678901"
    assert ck.latest() is not None
    assert ck.latest().step == 12345678901  # type: ignore[union-attr]


# -- failure inside the block or while committing -------------------------------------------
def test_exception_in_block_discards_and_keeps_older(root: Path) -> None:
    old = save(1, {"w": b"old"})
    with pytest.raises(KeyError, match="boom"), ck.saving(2) as d:
        (d / "w").write_bytes(b"partial")
        raise KeyError("boom")
    assert entries(root) == ["step-0000000001"]
    assert ck.verify(old) is None
    assert ck.latest().step == 1  # type: ignore[union-attr]


def test_other_oserror_in_block_propagates_unchanged(root: Path) -> None:
    with pytest.raises(FileNotFoundError) as info, ck.saving(1) as d:
        (d / "missing-dir" / "x").write_bytes(b"x")
    assert not isinstance(info.value, ck.CheckpointWriteError)
    assert entries(root) == []


def test_disk_full_in_block_becomes_checkpoint_write_error(root: Path) -> None:
    save(1, {"w": b"old"})
    with pytest.raises(ck.CheckpointWriteError) as info, ck.saving(2) as d:
        (d / "w").write_bytes(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")
    err = info.value
    assert isinstance(err, OSError) and err.errno == errno.ENOSPC
    assert "checkpoint step 2" in str(err) and "free" in str(err)
    assert "reached 100 B" in str(err)
    assert isinstance(err.__cause__, OSError)
    assert entries(root) == ["step-0000000001"]


def test_disk_full_while_committing(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = save(1, {"w": b"old"})

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_writer.os, "fsync", no_space)
    with pytest.raises(ck.CheckpointWriteError, match=r"checkpoint step 2: no space left") as info:
        save(2, {"w": b"new" * 1000})
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert entries(root) == ["step-0000000001"]
    assert ck.verify(old) is None


def test_io_error_while_committing_is_a_write_error(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def eio(*_a: object, **_k: object) -> None:
        raise OSError(errno.EIO, "Input/output error", "somefile")

    monkeypatch.setattr(_writer, "install", eio)
    with pytest.raises(ck.CheckpointWriteError, match="Input/output error") as info:
        save(3, {"w": b"x"})
    assert info.value.errno == errno.EIO
    monkeypatch.undo()
    assert entries(root) == []


def test_symlink_and_reserved_names_are_refused(root: Path, tmp_path: Path) -> None:
    with pytest.raises(ck.CheckpointError, match="symlink"), ck.saving(1) as d:
        (d / "link").symlink_to(tmp_path)
    with pytest.raises(ck.CheckpointError, match="reserved"), ck.saving(2) as d:
        (d / "tau-checkpoint.json").write_text("{}")
    assert entries(root) == []


# -- same step twice ---------------------------------------------------------------------------
def test_same_step_saved_twice_replaces(root: Path) -> None:
    save(5, {"w": b"first", "only-first": b"1"})
    path = save(5, {"w": b"second"})
    assert entries(root) == ["step-0000000005"]
    assert (path / "w").read_bytes() == b"second"
    assert not (path / "only-first").exists()
    assert ck.verify(path) is None


def test_crash_between_the_two_renames_is_recovered(root: Path) -> None:
    """A writer died after moving the old step-5 aside: the next writer puts it back."""
    old = save(5, {"w": b"old"})
    aside = root / f".tmp-old-0000000005-{dead_pid()}-{_writer.host_tag()}deadbeef"
    os.rename(old, aside)
    assert ck.latest() is None  # the aside copy is not a checkpoint
    save(1, {"w": b"other"})
    assert entries(root) == ["step-0000000001", "step-0000000005"]
    assert (root / "step-0000000005" / "w").read_bytes() == b"old"


# -- pruning -------------------------------------------------------------------------------
def test_default_keep_is_three(root: Path) -> None:
    for step in range(6):
        save(step, {"w": bytes([step])})
    assert entries(root) == [f"step-{s:010d}" for s in (3, 4, 5)]


def test_keep_from_env(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAU_CHECKPOINT_KEEP", "2")
    for step in range(0, 50, 10):
        save(step, {"w": b"x"})
    assert entries(root) == ["step-0000000030", "step-0000000040"]


def test_bad_keep_warns_and_keeps_three(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TAU_CHECKPOINT_KEEP", "zero")
    monkeypatch.setattr(_writer, "_warned", set())
    for step in range(5):
        save(step, {"w": b"x"})
    assert len(entries(root)) == 3
    assert capsys.readouterr().err.count("TAU_CHECKPOINT_KEEP") == 1


def test_prune_counts_only_verified_and_never_the_one_just_written(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAU_CHECKPOINT_KEEP", "2")
    for step in (10, 20, 30):
        save(step, {"w": b"abc"})
    (root / "step-0000000030" / "w").write_bytes(b"ab")  # corrupt newest: size mismatch
    save(25, {"w": b"abc"})  # lower than the corrupt one (a run that resumed earlier)
    # kept: 25 (just written) and 20 (newest verified besides); corrupt 30 is newer: left
    assert entries(root) == ["step-0000000020", "step-0000000025", "step-0000000030"]
    save(26, {"w": b"abc"})
    assert entries(root) == ["step-0000000025", "step-0000000026", "step-0000000030"]


def test_corrupt_old_checkpoints_are_pruned(root: Path) -> None:
    (root / "step-0000000001").mkdir(parents=True)  # no manifest
    for step in (2, 3, 4, 5):
        save(step, {"w": b"x"})
    assert entries(root) == [f"step-{s:010d}" for s in (3, 4, 5)]


# -- leftovers of crashed writers ------------------------------------------------------------
def test_stale_temporary_dirs_of_dead_writers_are_removed(root: Path) -> None:
    root.mkdir()
    tag = _writer.host_tag()
    dead = root / f".tmp-step-0000000009-{dead_pid()}-{tag}00000000"
    dead_del = root / f".tmp-del-0000000001-{dead_pid()}-{tag}00000001"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = root / f".tmp-step-0000000009-{sleeper.pid}-{tag}00000002"
        foreign = root / f".tmp-step-0000000009-{dead_pid()}-0badc0de00000003"
        unrelated = root / ".tmp-something-else"
        for d in (dead, dead_del, alive, foreign, unrelated):
            d.mkdir()
            (d / "partial").write_bytes(b"x")
        save(10, {"w": b"x"})
        left = set(entries(root))
        assert dead.name not in left and dead_del.name not in left
        assert {alive.name, foreign.name, unrelated.name, "step-0000000010"} == left
        # another host's leftovers go once they are a day old
        old = time.time() - 2 * 86400
        os.utime(foreign, (old, old))
        save(11, {"w": b"x"})
        assert foreign.name not in set(entries(root))
    finally:
        sleeper.kill()
        sleeper.wait()


def test_leftover_with_our_own_pid_from_an_earlier_process_is_removed(root: Path) -> None:
    root.mkdir()
    mine = root / f".tmp-step-0000000003-{os.getpid()}-{_writer.host_tag()}0000abcd"
    mine.mkdir()
    with ck.saving(4) as d:
        (d / "w").write_bytes(b"x")
        with ck.saving(5) as d2:  # a commit while another save of ours is open
            (d2 / "w").write_bytes(b"y")
        assert d.exists()  # ours, in flight: kept
    assert entries(root) == ["step-0000000004", "step-0000000005"]


def test_tmp_name_roundtrip() -> None:
    for kind in ("step", "old", "del"):
        name = _writer.tmp_name(kind, 42)
        assert _writer.parse_tmp_name(name) == (kind, 42, os.getpid(), _writer.host_tag())
    for bad in (".tmp-step-1-2", ".tmp-x-1-2-0123456789abcdef", "step-0000000001", ".tmp-"):
        assert _writer.parse_tmp_name(bad) is None


# -- latest() ------------------------------------------------------------------------------
def test_latest_none_then_newest(root: Path) -> None:
    assert ck.latest() is None
    save(1, {"a": b"1"})
    save(3, {"a": b"333"})
    save(2, {"a": b"22"})
    got = ck.latest()
    assert got is not None
    assert (got.step, got.size, got.path) == (3, 3, root / "step-0000000003")
    assert got.files == (ck.FileEntry("a", 3, hashlib.sha256(b"333").hexdigest()),)


@pytest.mark.parametrize(
    "corrupt",
    ["truncate", "flip", "no-manifest", "bad-json", "missing-file"],
)
def test_latest_skips_corrupt_newer(root: Path, corrupt: str) -> None:
    save(1, {"a": b"good"})
    p = save(2, {"a": b"newer", "b": b"bbbb"})
    if corrupt == "truncate":
        (p / "a").write_bytes(b"new")
    elif corrupt == "flip":
        (p / "a").write_bytes(b"newes")
    elif corrupt == "no-manifest":
        (p / "tau-checkpoint.json").unlink()
    elif corrupt == "bad-json":
        (p / "tau-checkpoint.json").write_text('{"format": 1, "step": 2, "fil')
    else:
        (p / "b").unlink()
    assert ck.latest().step == 1  # type: ignore[union-attr]
    if corrupt == "flip":  # only a full check sees a same-size change
        assert ck.latest(full=False).step == 2  # type: ignore[union-attr]


def test_latest_ignores_partial_temporary_dirs(root: Path) -> None:
    save(1, {"a": b"1"})
    partial = root / f".tmp-step-0000000002-{os.getpid()}-{_writer.host_tag()}00000000"
    partial.mkdir()
    (partial / "a").write_bytes(b"half")
    assert ck.latest().step == 1  # type: ignore[union-attr]


def test_latest_prefers_tau_resume_from(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    older = save(1, {"a": b"1"})
    save(2, {"a": b"2"})
    monkeypatch.setenv("TAU_RESUME_FROM", str(older))
    assert ck.latest().step == 1  # type: ignore[union-attr]
    # without a root at all, TAU_RESUME_FROM is enough
    monkeypatch.delenv("TAU_CHECKPOINT_DIR")
    assert ck.latest().step == 1  # type: ignore[union-attr]


def test_latest_falls_back_when_resume_from_is_bad(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    save(1, {"a": b"1"})
    monkeypatch.setenv("TAU_RESUME_FROM", str(root / "step-0000000099"))
    monkeypatch.setattr(_writer, "_warned", set())
    assert ck.latest().step == 1  # type: ignore[union-attr]
    assert "TAU_RESUME_FROM" in capsys.readouterr().err


def test_empty_resume_from_means_fresh_start(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save(1, {"a": b"1"})
    monkeypatch.setenv("TAU_RESUME_FROM", "")
    assert ck.latest() is None


def test_checkpoints_of_this_attempt_win_over_resume_from(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAU_RUN_ID", "run-1")
    monkeypatch.setenv("TAU_ATTEMPT", "0")
    save(10, {"a": b"a"})
    save(20, {"a": b"b"})  # say the server skipped this one (hardware fault)
    monkeypatch.setenv("TAU_ATTEMPT", "1")
    monkeypatch.setenv("TAU_RESUME_FROM", str(root / "step-0000000010"))
    assert ck.latest().step == 10  # type: ignore[union-attr]
    save(11, {"a": b"c"})  # attempt 1 goes on from 10
    got = ck.latest()
    assert got is not None and (got.step, got.attempt) == (11, 1)


# -- write_files ---------------------------------------------------------------------------
def test_write_files_hashes_while_writing(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = os.urandom(3 << 20)
    with ck.saving(1) as d:
        got = ck.write_files(d, {"big.bin": big, "sub/small.bin": bytearray(b"small")})
        assert got == [
            ck.FileEntry("big.bin", len(big), hashlib.sha256(big).hexdigest()),
            ck.FileEntry("sub/small.bin", 5, hashlib.sha256(b"small").hexdigest()),
        ]
        (d / "plain.txt").write_text("plain")

        def no_rehash(path: object) -> str:
            assert str(path).endswith("plain.txt"), f"re-hashed {path}"
            return hashlib.sha256(b"plain").hexdigest()

        monkeypatch.setattr(_writer, "sha256_file", no_rehash)
    monkeypatch.undo()
    assert ck.verify(root / "step-0000000001") is None


def test_write_files_then_modified_is_hashed_again(root: Path) -> None:
    with ck.saving(1) as d:
        ck.write_files(d, {"a.bin": b"first"})
        with open(d / "a.bin", "ab") as f:
            f.write(b" and more")
    assert ck.verify(root / "step-0000000001") is None
    assert ck.latest().files[0].size == len(b"first and more")  # type: ignore[union-attr]


def test_write_files_rejects_bad_input(root: Path) -> None:
    with ck.saving(1) as d:
        with pytest.raises(ValueError, match="relative"):
            ck.write_files(d, {"/abs": b"x"})
        with pytest.raises(ValueError, match=r"'\.\.'"):
            ck.write_files(d, {"a/../b": b"x"})
        with pytest.raises(TypeError, match="buffer protocol"):
            ck.write_files(d, {"a": "text"})
        with pytest.raises(ValueError, match="both a file and a directory"):
            ck.write_files(d, {"a": b"x", "a/b": b"y"})
        ck.write_files(d, {"ok": b"x"})
    assert [f.path for f in ck.latest().files] == ["ok"]  # type: ignore[union-attr]


# -- O_DIRECT for big buffers ----------------------------------------------------------------
def count_direct(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = _writer.write_direct

    def counting(fd: int, data: memoryview | bytes) -> None:
        calls.append(len(data))
        real(fd, data)

    monkeypatch.setattr(_writer, "write_direct", counting)
    return calls


def test_big_buffers_go_through_o_direct(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_direct(monkeypatch)
    odd = os.urandom(_writer.DIRECT_MIN + 3 * _writer.DIRECT_CHUNK + 4097)  # padded last chunk
    exact = os.urandom(2 * _writer.DIRECT_CHUNK)
    with ck.saving(1) as d:
        ck.write_files(d, {"odd.bin": odd, "exact.bin": exact, "small.bin": b"s" * 100})
    path = root / "step-0000000001"
    assert sorted(calls) == [len(exact), len(odd)]  # the small one is written plainly
    assert (path / "odd.bin").read_bytes() == odd
    assert (path / "exact.bin").read_bytes() == exact
    assert ck.verify(path) is None


def test_o_direct_can_be_turned_off(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_direct(monkeypatch)
    monkeypatch.setenv("TAU_CHECKPOINT_DIRECT", "0")
    with ck.saving(1) as d:
        ck.write_files(d, {"big.bin": bytes(_writer.DIRECT_MIN)})
    assert calls == []
    assert ck.verify(root / "step-0000000001") is None


def test_o_direct_refused_falls_back_to_plain_writes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused: list[int] = []

    def einval(fd: int, data: memoryview | bytes) -> None:
        refused.append(fd)
        os.ftruncate(fd, 12345)  # a partial file that must not survive
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(_writer, "write_direct", einval)
    monkeypatch.setattr(_writer, "_no_direct_devs", set())
    big = os.urandom(_writer.DIRECT_MIN + 1)
    with ck.saving(1) as d:
        ck.write_files(d, {"a.bin": big, "b.bin": big})
    assert len(refused) == 1  # the filesystem is remembered: b.bin went plain at once
    assert (root / "step-0000000001" / "a.bin").read_bytes() == big
    assert ck.verify(root / "step-0000000001") is None
