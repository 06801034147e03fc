"""save_async(): a consistent snapshot whatever the caller does after the call returns."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from taugrid.sdk import _writer
from taugrid.sdk import checkpoint as ck

MODES = ["fork", "copy"]


def no_temporaries(root: Path) -> bool:
    return not any(n.startswith(".tmp-") for n in os.listdir(root))


@pytest.mark.parametrize("mode", MODES)
def test_saved_bytes_are_those_at_call_time(root: Path, mode: str) -> None:
    weights = np.arange(1 << 20, dtype=np.float32)  # 4 MiB, updated in place below
    moments = bytearray(os.urandom(1 << 16))
    frozen = b"immutable"
    at_call = {"w.bin": weights.tobytes(), "opt/m.bin": bytes(moments), "f.bin": frozen}
    job = ck.save_async(3, {"w.bin": weights, "opt/m.bin": moments, "f.bin": frozen}, mode=mode)
    weights += 1.0  # the training loop goes on at once
    moments[:] = b"\0" * len(moments)
    moments.extend(b"grow")  # no buffer export left behind
    got = job.wait(timeout=60)
    assert job.done()
    assert got.step == 3 and got.path == root / "step-0000000003"
    for rel, data in at_call.items():
        assert (got.path / rel).read_bytes() == data
    assert {f.path: f.sha256 for f in got.files} == {
        rel: hashlib.sha256(d).hexdigest() for rel, d in at_call.items()
    }
    assert ck.verify(got.path) is None
    assert ck.latest() == got
    assert no_temporaries(root)


@pytest.mark.parametrize("mode", MODES)
def test_repeated_saves_and_staging_reuse(root: Path, mode: str) -> None:
    state = np.zeros(1 << 18, dtype=np.int64)
    for step in range(4):
        state[:] = step
        job = ck.save_async(step, {"s.bin": state}, mode=mode)
        state[:] = -1
        got = job.wait(timeout=60)
        assert np.frombuffer((got.path / "s.bin").read_bytes(), dtype=np.int64).tolist() == [
            step
        ] * (1 << 18)
    assert sorted(os.listdir(root)) == [f"step-{s:010d}" for s in (1, 2, 3)]


@pytest.mark.parametrize("mode", MODES)
def test_non_contiguous_array_saved_in_c_order(root: Path, mode: str) -> None:
    base = np.arange(64, dtype=np.int16).reshape(8, 8)
    view = base[:, ::2]
    got = ck.save_async(1, {"v.bin": view, "t.bin": base.T}, mode=mode).wait(timeout=60)
    assert (got.path / "v.bin").read_bytes() == view.tobytes()
    assert (got.path / "t.bin").read_bytes() == base.T.tobytes()


@pytest.mark.parametrize("mode", MODES)
def test_writer_callable_sees_the_state_at_call_time(root: Path, mode: str) -> None:
    state = {"value": b"at-call"}

    def writer(d: Path) -> None:
        time.sleep(0.2)
        (d / "state.bin").write_bytes(state["value"])

    job = ck.save_async(5, writer, mode=mode)
    state["value"] = b"changed"
    got = job.wait(timeout=60)
    assert (got.path / "state.bin").read_bytes() == b"at-call"
    assert ck.verify(got.path) is None


def test_writer_error_raised_by_wait_with_its_type(root: Path) -> None:
    ck.save_async(1, {"a": b"a"}).wait(timeout=60)

    def broken(d: Path) -> None:
        (d / "half").write_bytes(b"x")
        raise ValueError("the writer broke")

    job = ck.save_async(2, broken, mode="fork")
    with pytest.raises(ValueError, match="the writer broke") as info:
        job.wait(timeout=60)
    assert any("checkpoint writer process" in n for n in getattr(info.value, "__notes__", []))
    assert sorted(os.listdir(root)) == ["step-0000000001"]
    # copy mode runs the writer in the caller: the error comes at once
    with pytest.raises(ValueError, match="the writer broke"):
        ck.save_async(2, broken, mode="copy")
    assert sorted(os.listdir(root)) == ["step-0000000001"]
    assert ck.save_async(3, {"a": b"b"}).wait(timeout=60).step == 3  # slot released


def test_writer_process_killed(root: Path) -> None:
    def die(d: Path) -> None:
        (d / "half").write_bytes(b"x")
        os.kill(os.getpid(), signal.SIGKILL)

    job = ck.save_async(1, die, mode="fork")
    with pytest.raises(ck.CheckpointError, match="killed by signal 9"):
        job.wait(timeout=60)
    assert os.listdir(root) == []  # its temporary directory was removed


@pytest.mark.parametrize("mode", MODES)
def test_disk_full_raises_write_error_from_wait(
    root: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck.save_async(1, {"a": b"old"}, mode=mode).wait(timeout=60)

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_writer.os, "fsync", no_space)  # the fork child inherits it
    job = ck.save_async(2, {"a": os.urandom(1 << 20)}, mode=mode)
    with pytest.raises(ck.CheckpointWriteError, match="checkpoint step 2: no space left") as info:
        job.wait(timeout=60)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert sorted(os.listdir(root)) == ["step-0000000001"]
    assert ck.verify(root / "step-0000000001") is None


@pytest.mark.parametrize("mode", MODES)
def test_one_save_in_flight_at_a_time(root: Path, mode: str) -> None:
    def slow(d: Path) -> None:
        time.sleep(0.5)
        (d / "slow").write_bytes(b"1")

    first = ck.save_async(1, slow, mode=mode)
    second = ck.save_async(2, {"fast": b"2"}, mode=mode)
    assert first.done()  # the second call waited for the first
    second.wait(timeout=60)
    third = ck.save_async(3, slow, mode=mode)
    with ck.saving(4) as d:  # a synchronous commit waits too
        (d / "x").write_bytes(b"x")
    assert third.done()
    assert sorted(os.listdir(root)) == [f"step-{s:010d}" for s in (2, 3, 4)]


def test_wait_timeout_and_repr(root: Path) -> None:
    job = ck.save_async(1, lambda d: (time.sleep(0.5), (d / "x").write_bytes(b"x"))[1] and None)
    assert not job.done() and "running" in repr(job)
    with pytest.raises(TimeoutError, match="still being written"):
        job.wait(timeout=0.01)
    assert job.wait(timeout=60).step == 1
    assert "done" in repr(job)


def test_bad_arguments_fail_at_once(root: Path) -> None:
    with pytest.raises(TypeError, match="buffer protocol"):
        ck.save_async(1, {"a": ["not", "bytes"]})
    with pytest.raises(ValueError, match="must be relative"):
        ck.save_async(1, {"/etc/passwd": b"x"})
    with pytest.raises(ValueError, match="reserved"):
        ck.save_async(1, {"tau-checkpoint.json": b"x"})
    with pytest.raises(TypeError, match="mapping"):
        ck.save_async(1, b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        ck.save_async(1, {"a": b"x"}, mode="thread")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ck.save_async(-1, {"a": b"x"})
    assert not root.exists() or os.listdir(root) == []
    assert ck.save_async(1, {"a": b"x"}).wait(timeout=60).step == 1  # slot not leaked


def test_parallel_staging_copy_is_exact(root: Path) -> None:
    from taugrid.sdk import _async

    n = 2 * _async._COPY_SLICE + 12345  # big enough for two copying threads, odd size
    src = np.frombuffer(os.urandom(1 << 20), dtype=np.uint8)
    big = np.resize(src, n)
    big[-5:] = [1, 2, 3, 4, 5]
    dst = bytearray(n)
    _async._copy_into(dst, memoryview(big).cast("B"))
    assert dst == big.tobytes()
    frozen = big.copy()
    frozen.flags.writeable = False  # read-only: the plain copy
    dst2 = bytearray(n)
    _async._copy_into(dst2, memoryview(frozen).cast("B"))
    assert dst2 == dst
    dst.extend(b"x")  # no export left on the staging buffer
    job = ck.save_async(1, {"big.bin": big}, mode="copy")
    at_call = hashlib.sha256(big).hexdigest()
    big[:] = 0
    got = job.wait(timeout=120)
    assert got.files[0].sha256 == at_call
    assert ck.verify(got.path) is None


def test_auto_mode_choice(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from taugrid.sdk import _async

    small = np.zeros(1 << 16, dtype=np.uint8)
    job = ck.save_async(1, {"s.bin": small})
    assert job.mode == "copy"  # buffers: copy
    job.wait(timeout=60)
    job = ck.save_async(2, lambda d: (d / "w").write_bytes(b"w") and None)
    assert job.mode == "fork" and job.pid is not None  # a writer callable: fork
    job.wait(timeout=60)
    # staging more than a quarter of the memory available: fork (no extra memory)
    monkeypatch.setattr(_async, "mem_available", lambda: 4 * (1 << 16) - 1)
    assert ck.save_async(3, {"new-name.bin": small}).mode == "fork"
    # already staged from an earlier save of the same name and size: copy again
    monkeypatch.setattr(_async, "mem_available", lambda: 4 * (1 << 16) - 1)
    assert ck.save_async(4, {"s.bin": small}).mode == "copy"
    assert ck.save_async(5, {"b.bin": b"immutable, never copied"}).mode == "copy"
    ck.save_async(6, {"s.bin": small}).wait(timeout=60)
    assert sorted(os.listdir(root)) == [f"step-{s:010d}" for s in (4, 5, 6)]
