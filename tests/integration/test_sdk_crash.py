"""Crash safety of the checkpoint SDK with real processes and a real full disk.

* A writer process saving ~3 MB checkpoints in a loop (``saving()`` and ``save_async()``)
  is SIGKILLed (with its whole process group, as the executor does) at random moments, 20
  times in a row, each time restarted on the same directory: after every kill the newest
  checkpoint verifies with full sha256 and holds exactly what was written for its step,
  every ``step-*`` directory verifies, and the restarted writer resumes at latest + 1.
* A 4 MiB tmpfs: a checkpoint bigger than the free space raises CheckpointWriteError,
  leaves no temporary directory, and older checkpoints stay and verify.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servicecheck import require_service
from taugrid.sdk import checkpoint as ck

PART = 1536 * 1024  # two parts per checkpoint: 3 MiB
WRITER = r"""
import hashlib, os, sys
from taugrid.sdk import checkpoint as ck

PART = int(sys.argv[1])

def payload(step, i):
    block = hashlib.sha256(f"{step}-{i}".encode()).digest()
    return block * (PART // len(block))

last = ck.latest()
if last is not None:  # what we resume from must be exactly what was saved
    for i in range(2):
        assert (last.path / f"part{i}.bin").read_bytes() == payload(last.step, i), last
start = last.step + 1 if last is not None else 0
print(f"start {start}", flush=True)
step = start
while True:
    files = {f"part{i}.bin": payload(step, i) for i in range(2)}
    if step % 3 == 2:
        ck.save_async(step, files).wait()
    else:
        with ck.saving(step) as d:
            for name, data in files.items():
                with open(d / name, "wb") as f:
                    f.write(data)
    print(f"saved {step}", flush=True)
    step += 1
"""


def payload(step: int, i: int) -> bytes:
    block = hashlib.sha256(f"{step}-{i}".encode()).digest()
    return block * (PART // len(block))


def writer_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAU_")}
    env["TAU_CHECKPOINT_DIR"] = str(root)
    return env


def test_kill_9_at_random_moments(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    previous = -1
    saved_lines = 0
    for round_no in range(20):
        last = ck.latest(root=root)
        expected_start = last.step + 1 if last is not None else 0
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(PART)],
            env=writer_env(root),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            assert proc.stdout is not None and proc.stderr is not None
            first = proc.stdout.readline()
            assert first == f"start {expected_start}\n", (
                f"seed {seed} round {round_no}: {first!r} {proc.stderr.read()}"
            )
            time.sleep(rng.uniform(0.0, 0.35))
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL, f"seed {seed}: writer failed early: {err}"
        saved_lines += out.count("saved ")
        now = ck.latest(root=root)  # full sha256
        if now is None:
            assert previous == -1, f"seed {seed} round {round_no}: checkpoints vanished"
            continue
        assert ck.verify(now.path, full=True) is None
        for i in range(2):
            assert (now.path / f"part{i}.bin").read_bytes() == payload(now.step, i)
        assert now.step >= previous, f"seed {seed}: latest went back {previous} -> {now.step}"
        previous = now.step
        for info in ck.list_checkpoints(root, full=True):  # no partial step-* ever
            assert info.verified, f"seed {seed} round {round_no}: {info.path}: {info.problem}"
    assert previous >= 5, f"seed {seed}: only reached step {previous}"
    assert saved_lines >= 5
    # The next commit removes what the killed writers left half written.
    with ck.saving(previous + 1, root=root) as d:
        (d / "last").write_bytes(b"x")
    leftovers = [n for n in os.listdir(root) if n.startswith(".tmp-")]
    assert leftovers == []
    assert len(os.listdir(root)) == 3  # keep=3


# -- disk full -----------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        require_service(False, "the disk-full test mounts a 4 MiB tmpfs, which needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        require_service(False, f"cannot mount a 4 MiB tmpfs: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        done = subprocess.run(["umount", str(mnt)], capture_output=True)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def assert_only_old(root: Path, old: Path) -> None:
    assert sorted(os.listdir(root)) == [old.name]  # no temporary directory left
    assert ck.verify(old, full=True) is None
    latest = ck.latest(root=root)
    assert latest is not None and latest.path == old


def test_disk_full_keeps_older_checkpoints(small_disk: Path) -> None:
    root = small_disk / "ckpt"
    with ck.saving(1, root=root) as d:
        (d / "w.bin").write_bytes(os.urandom(1 << 20))
    old = root / "step-0000000001"
    free = free_bytes(small_disk)
    too_big = os.urandom(free + (1 << 20))

    # 1. the user's own writes in the block hit ENOSPC
    with pytest.raises(ck.CheckpointWriteError) as info, ck.saving(2, root=root) as d:
        (d / "w.bin").write_bytes(too_big)
    err = info.value
    assert err.errno == errno.ENOSPC
    assert "checkpoint step 2: no space left" in str(err)
    assert "MiB free" in str(err) and "older checkpoints are intact" in str(err)
    assert_only_old(root, old)

    # 2. the SDK's own buffer writer
    with (
        pytest.raises(ck.CheckpointWriteError, match="step 3: no space left"),
        ck.saving(3, root=root) as d,
    ):
        ck.write_files(d, {"w.bin": too_big})
    assert_only_old(root, old)

    # 3. an async save (fork): the error comes out of wait()
    for mode in ("fork", "copy"):
        job = ck.save_async(4, {"w.bin": too_big}, root=root, mode=mode)  # type: ignore[arg-type]
        with pytest.raises(ck.CheckpointWriteError, match="step 4: no space left"):
            job.wait(timeout=60)
        assert_only_old(root, old)


def test_disk_full_while_writing_the_manifest(small_disk: Path) -> None:
    """The data fits to the last page; the manifest does not: the commit fails cleanly."""
    root = small_disk / "ckpt"
    with ck.saving(1, root=root) as d:
        (d / "w.bin").write_bytes(b"old" * 1000)
    old = root / "step-0000000001"
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (free_bytes(small_disk) - 2 * os.statvfs(small_disk).f_frsize))
    left = free_bytes(small_disk)
    with (
        pytest.raises(ck.CheckpointWriteError, match="step 2: no space left") as info,
        ck.saving(2, root=root) as d,
    ):
        (d / "w.bin").write_bytes(b"y" * left)  # fits exactly
        assert free_bytes(small_disk) == 0
    assert info.value.errno == errno.ENOSPC
    assert_only_old(root, old)
    filler.unlink()
    with ck.saving(2, root=root) as d:
        (d / "w.bin").write_bytes(b"y" * left)
    assert sorted(os.listdir(root)) == [old.name, "step-0000000002"]
    assert ck.verify(root / "step-0000000002") is None
