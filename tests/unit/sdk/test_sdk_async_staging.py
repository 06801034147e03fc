"""Copy mode's staging: background copies with wait_staged(), reused page-aligned staging
buffers, and O_DIRECT writes straight from them."""

from __future__ import annotations

import hashlib
import mmap
import os
import time
from pathlib import Path

import numpy as np
import pytest

from taugrid.sdk import _staging, _writer
from taugrid.sdk import checkpoint as ck


@pytest.fixture(autouse=True)
def empty_pool() -> None:
    _staging.keep({})


def no_temporaries(root: Path) -> bool:
    return not any(n.startswith(".tmp-") for n in os.listdir(root))


@pytest.mark.parametrize("size", [1 << 16, 2 * _staging.COPY_SLICE + 12345])
def test_background_copy_holds_the_state_at_the_call(root: Path, size: int) -> None:
    weights = np.frombuffer(os.urandom(1 << 20), dtype=np.uint8)
    weights = np.resize(weights, size)  # big enough for the parallel copy in one case
    moments = np.arange(1 << 18, dtype=np.float64)
    at_call = {"w.bin": weights.tobytes(), "opt/m.bin": moments.tobytes(), "f.bin": b"frozen"}
    job = ck.save_async(
        7, {"w.bin": weights, "opt/m.bin": moments, "f.bin": b"frozen"}, background_copy=True
    )
    assert job.mode == "copy"
    loss = float(moments.sum())  # the forward pass: reads only, while the copy runs
    job.wait_staged(timeout=60)
    assert job.staged()
    weights += 1  # the optimizer step, after wait_staged()
    moments *= -loss
    got = job.wait(timeout=120)
    for rel, data in at_call.items():
        assert (got.path / rel).read_bytes() == data
    assert {f.path: f.sha256 for f in got.files} == {
        rel: hashlib.sha256(d).hexdigest() for rel, d in at_call.items()
    }
    assert ck.verify(got.path) is None
    assert no_temporaries(root)


def test_background_writer_callable_and_wait_staged_timeout(root: Path) -> None:
    state = {"value": b"at-call"}

    def writer(d: Path) -> None:
        time.sleep(0.5)
        (d / "state.bin").write_bytes(state["value"])

    job = ck.save_async(3, writer, mode="copy", background_copy=True)
    assert not job.staged()  # the writer is still running in the background
    with pytest.raises(TimeoutError, match="still being copied"):
        job.wait_staged(timeout=0.01)
    job.wait_staged(timeout=60)
    state["value"] = b"changed"  # allowed once staged
    got = job.wait(timeout=60)
    assert (got.path / "state.bin").read_bytes() == b"at-call"
    assert ck.verify(got.path) is None


@pytest.mark.parametrize("mode", ["copy", "fork"])
def test_staged_at_return_unless_background(root: Path, mode: str) -> None:
    job = ck.save_async(1, {"a.bin": np.zeros(1 << 16, dtype=np.uint8)}, mode=mode)
    assert job.staged()
    job.wait_staged(timeout=0)  # returns at once
    job.wait(timeout=60)
    # fork mode ignores background_copy: the fork itself is the snapshot
    job = ck.save_async(2, {"a.bin": b"x"}, mode=mode, background_copy=True)
    if mode == "fork":
        assert job.staged()
    assert job.wait(timeout=60).step == 2


def test_background_writer_error_from_wait(root: Path) -> None:
    ck.save_async(1, {"a": b"a"}).wait(timeout=60)

    def broken(d: Path) -> None:
        (d / "half").write_bytes(b"x")
        raise ValueError("the writer broke")

    job = ck.save_async(2, broken, mode="copy", background_copy=True)
    job.wait_staged(timeout=60)  # returns: there is nothing left to wait for
    with pytest.raises(ValueError, match="the writer broke"):
        job.wait(timeout=60)
    assert sorted(os.listdir(root)) == ["step-0000000001"]  # nothing half-written left
    assert ck.save_async(3, {"a": b"b"}).wait(timeout=60).step == 3  # slot released


def test_staging_buffers_are_reused_then_unmapped(root: Path) -> None:
    a = np.ones(100_000, dtype=np.uint8)
    ck.save_async(1, {"a.bin": a}).wait(timeout=60)
    first = _staging.pool["a.bin"]
    assert len(first) % mmap.PAGESIZE == 0 and len(first) >= a.nbytes
    ck.save_async(2, {"a.bin": a}).wait(timeout=60)
    assert _staging.pool["a.bin"] is first  # same name and size: the same memory
    bigger = np.ones(300_000, dtype=np.uint8)
    ck.save_async(3, {"a.bin": bigger}).wait(timeout=60)
    assert _staging.pool["a.bin"] is not first and first.closed  # resized: old one unmapped
    second = _staging.pool["a.bin"]
    got = ck.save_async(4, {"b.bin": a}).wait(timeout=60)
    assert set(_staging.pool) == {"b.bin"} and second.closed  # names not saved: dropped
    assert (got.path / "b.bin").read_bytes() == a.tobytes()


def test_direct_write_in_place_from_aligned_memory(tmp_path: Path) -> None:
    size = 2 * _writer.DIRECT_CHUNK + 4097  # whole chunks, a partial one, a partial block
    buf = mmap.mmap(-1, -(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
    data = os.urandom(1 << 20) * (size >> 20) + os.urandom(size % (1 << 20))
    buf[:size] = data
    with memoryview(buf) as whole, whole[:size] as view:
        assert _writer.aligned_address(view) is not None
        assert _writer.aligned_address(whole[1:]) is None  # not on a page boundary
        assert _writer.aligned_address(memoryview(bytes(16))) is None  # read-only
        path = tmp_path / "direct.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_DIRECT", 0))
        try:
            _writer.write_in_place(fd, view)  # O_DIRECT refuses misaligned memory
            os.fsync(fd)
        finally:
            os.close(fd)
        assert path.read_bytes() == data
        (tmp_path / "d").mkdir()
        entries = _writer.write_files(tmp_path / "d", [("x.bin", view)])
    assert entries[0].sha256 == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "d" / "x.bin").read_bytes() == data
    buf.close()  # no export left behind
