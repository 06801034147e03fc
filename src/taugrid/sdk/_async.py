"""``save_async``: persist a checkpoint while the training loop goes on. Stdlib only.

Three ways to take a consistent snapshot of state that the caller mutates in place after
the call. Measured with ``bench/checkpoint_async.py`` (1 GiB of NumPy state, 2-vCPU VM;
a synchronous ``saving()`` + ``write_files`` of the same state blocks 0.75-1.1 s there;
"update": the loop rewrites the whole state right after the call; "step": it reads it all
first, as a training step reads its parameters before the optimizer writes them):

``copy`` (the default for a mapping of buffers)
    The buffers are copied into page-aligned staging buffers (``_staging``) before the
    call returns (several threads, ctypes memmove, which releases the GIL), then written
    with O_DIRECT straight from them, hashed and committed by a thread. The staging
    buffers are kept and reused by the next save of the same names and sizes. Blocked for
    one copy at memory bandwidth: ~80 ms per GiB here, 0.09-0.105x sync on an idle machine
    and more under CPU load (the first save also faults in fresh memory: 0.3-0.7 s); the
    loop runs slower while the thread writes and hashes: ~0.15-0.18x sync lost per save
    in all. Costs one extra copy of the state in memory for as long as the process runs.
    No fork hazards; works everywhere.

``copy`` with ``background_copy=True``
    The call returns at once and the same copy (or the writer callable) runs in the
    background; the caller must not change the buffers until ``wait_staged()`` returns.
    A step that reads its state before writing it waits only for what is left of the copy:
    0.04x sync blocked here; the copy competes with the loop's own reads for memory
    bandwidth, so on a CPU-bound loop the total lost (0.2x) is not smaller than copy's.

``fork`` (the default for a writer callable on Linux, and for a mapping bigger than a
quarter of the memory available)
    ``os.fork()``: the child sees the memory as it was at the call (copy-on-write), writes
    and commits the checkpoint, and exits (``os._exit``); a thread of the parent waits.
    Blocked only for the fork (~20 ms; 0.02x sync), no extra memory up front. But each
    page the parent writes while the child still runs is copied on that write, at several
    microseconds a page on a VM: a loop that rewrites its 1 GiB during the save loses
    1.1-1.4x a sync save in all, nothing when it does not touch it (a CPU snapshot of GPU
    tensors). A writer callable runs in the child, so ``torch.save`` of a state dict gets
    the snapshot without blocking the caller for the serialization. Caveats of fork: the
    child has only the forking thread, so it must not use CUDA (snapshot GPU tensors to
    CPU first) or locks other threads may hold (the SDK's child uses os calls, hashlib,
    json and its own fresh locks); a writer callable must respect the same.

With ``mode="copy"`` a writer callable runs synchronously in the caller (its files land in
the page cache) and only hashing, fsync and the rename happen in the background.

Either way the process-wide writer slot allows one async save in flight: a second
``save_async`` (or a ``saving()`` commit) waits until the first has finished.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import pickle
import signal
import struct
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

from taugrid.sdk import _staging, _writer
from taugrid.sdk._staging import COPY_SLICE as _COPY_SLICE  # noqa: F401 - tests use it
from taugrid.sdk._staging import copy_into as _copy_into
from taugrid.sdk._store import (
    Checkpoint,
    CheckpointError,
    FileEntry,
    check_rel_path,
    check_step,
    resolve_root,
)

Mode = Literal["auto", "fork", "copy"]
Writer = Callable[[Path], None]
_HEADER = struct.Struct("<Q")


class AsyncSave:
    """A checkpoint being written in the background. ``wait()`` returns it once durable."""

    def __init__(self, step: int, mode: str, root: Path) -> None:
        self.step = step
        self.mode = mode
        self.root = root
        self.pid: int | None = None  # the writer process (fork mode)
        self._staged = threading.Event()  # the state is captured: the caller may change it
        self._event = threading.Event()
        self._result: Checkpoint | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """True once the save has finished, successfully or not."""
        return self._event.is_set()

    def staged(self) -> bool:
        """True once the saved state is captured, so the caller may change its buffers:
        at once unless the save was started with ``background_copy=True``."""
        return self._staged.is_set()

    def wait_staged(self, timeout: float | None = None) -> None:
        """Block until the state is captured (see :meth:`staged`); after that the caller
        may change the buffers it passed. Errors of the save are raised by :meth:`wait`;
        ``TimeoutError`` if the state is still being copied after ``timeout`` seconds."""
        if not self._staged.wait(timeout):
            raise TimeoutError(
                f"checkpoint step {self.step}: the state is still being copied after {timeout} s"
            )

    def wait(self, timeout: float | None = None) -> Checkpoint:
        """Block until the checkpoint is committed and return it; raise the writer's error
        (a :class:`CheckpointWriteError` when the disk is full); ``TimeoutError`` if it is
        still being written after ``timeout`` seconds."""
        if not self._event.wait(timeout):
            raise TimeoutError(
                f"checkpoint step {self.step} is still being written after {timeout} s"
            )
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def __repr__(self) -> str:
        state = "running" if not self.done() else ("failed" if self._error else "done")
        return f"<AsyncSave step={self.step} mode={self.mode} {state}>"

    def _finish(self, result: Checkpoint | None, error: BaseException | None) -> None:
        self._result, self._error = result, error
        if error is not None:
            _writer.warn_once(
                f"async-{id(self)}", f"async checkpoint of step {self.step} failed: {error}"
            )
        self._staged.set()  # also when staging itself failed: nothing is left to wait for
        _writer.slot.release()
        self._event.set()


def save_async(
    step: int,
    files_or_writer: Mapping[str, Any] | Writer,
    *,
    root: str | os.PathLike[str] | None = None,
    mode: Mode = "auto",
    background_copy: bool = False,
) -> AsyncSave:
    """Start writing checkpoint ``step``; return as soon as the caller may mutate its state.

    ``files_or_writer`` is either a mapping ``{relative/posix/path: buffer}`` (``bytes``,
    ``bytearray``, ``memoryview`` or any buffer-protocol object such as a NumPy array; torch
    tensors via ``t.numpy()``; the bytes saved are ``memoryview(obj).tobytes()``, C order),
    or a ``writer(directory)`` callable that writes the files itself (``torch.save``,
    safetensors, ...). The content saved is the content at the time of the call, whatever
    the caller does afterwards. ``mode``: ``copy`` or ``fork``, see the module docstring;
    ``auto`` picks ``copy`` for buffers (``fork`` if staging them would take more than a
    quarter of the memory available) and ``fork`` for a writer callable (on Linux).

    ``background_copy=True`` (copy mode): return at once and capture the state in the
    background (the copy into the staging buffers, or the writer callable); the caller
    must not change the buffers it passed until :meth:`AsyncSave.wait_staged` has
    returned (a training step reads its parameters before the optimizer writes them: wait
    just before that write). No effect in fork mode, which captures the state by forking.

    Errors in the arguments raise at once; errors while writing are raised by
    :meth:`AsyncSave.wait` (and reported once on stderr).
    """
    step = check_step(step)
    root_p = resolve_root(root)
    items: list[tuple[str, memoryview | bytes]] | None = None
    writer: Writer | None = None
    if isinstance(files_or_writer, Mapping):
        items = buffers(files_or_writer)
    elif callable(files_or_writer):
        writer = files_or_writer
    else:
        raise TypeError(
            "save_async() wants a mapping {path: buffer} or a writer(directory) callable, "
            f"not {type(files_or_writer).__name__}"
        )
    handed_over = False  # the background thread releases the views once it has copied them
    try:
        if mode == "auto":
            mode = _auto_mode(items)
        if mode not in ("fork", "copy"):
            raise ValueError(f"mode must be 'auto', 'fork' or 'copy', not {mode!r}")
        job = AsyncSave(step, mode, root_p)
        _writer.slot.acquire()
        try:
            if mode == "fork":
                _start_fork(job, items, writer)
                job._staged.set()
            else:
                handed_over = _start_copy(job, items, writer, background=background_copy)
        except BaseException:
            _writer.slot.release()
            raise
    finally:
        if not handed_over:
            release_views(items)
    return job


def release_views(items: Sequence[tuple[str, memoryview | bytes]] | None) -> None:
    for _, data in items or ():
        if isinstance(data, memoryview):
            data.release()


# -- arguments -------------------------------------------------------------------------------
def _can_fork() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def mem_available() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _auto_mode(items: Sequence[tuple[str, memoryview | bytes]] | None) -> Literal["fork", "copy"]:
    """fork for a writer callable; copy for buffers, unless staging them would take more
    than a quarter of the memory available (fork needs no extra memory up front)."""
    if not _can_fork():
        return "copy"
    if items is None:
        return "fork"
    staged = 0
    for rel, data in items:
        if isinstance(data, bytes):
            continue  # immutable: never copied
        if not _staging.is_pooled(rel, data.nbytes):
            staged += data.nbytes
    available = mem_available()
    if available is not None and staged > available // 4:
        return "fork"
    return "copy"


def buffers(files: Mapping[str, Any]) -> list[tuple[str, memoryview | bytes]]:
    items: list[tuple[str, memoryview | bytes]] = []
    for rel, obj in files.items():
        why = check_rel_path(rel)
        if why is not None:
            raise ValueError(why)
        if isinstance(obj, bytes):
            items.append((rel, obj))
            continue
        try:
            view = memoryview(obj)
        except TypeError:
            raise TypeError(
                f"{rel}: a {type(obj).__name__} does not support the buffer protocol; pass "
                "bytes, bytearray, memoryview, a NumPy array (torch: tensor.numpy()), or a "
                "writer(directory) callable instead of the mapping"
            ) from None
        items.append((rel, view))
    names = {rel for rel, _ in items}
    for rel in names:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in names:
                raise ValueError(f"{rel}: {'/'.join(parts[:i])} is both a file and a directory")
    return items


def flat(data: memoryview | bytes) -> memoryview | bytes:
    """Bytes-shaped view of a buffer (no copy when C-contiguous)."""
    if isinstance(data, bytes):
        return data
    if data.c_contiguous:
        return data if data.format == "B" and data.ndim == 1 else data.cast("B")
    return data.tobytes()


def _save_items(
    step: int,
    root: Path,
    items: Sequence[tuple[str, memoryview | bytes]] | None,
    writer: Writer | None,
) -> Checkpoint:
    """Write and commit checkpoint ``step`` (in the fork child, or the copy-mode thread)."""
    tmp = _writer.new_tmp_dir(root, step)
    if items is not None:
        with _writer.discarded_on_error(tmp, step, root, user_code=False):
            _writer.write_files(tmp, [(rel, flat(d)) for rel, d in items])
    else:
        assert writer is not None
        with _writer.discarded_on_error(tmp, step, root, user_code=True):
            writer(tmp)
    with _writer.discarded_on_error(tmp, step, root, user_code=False):
        ckpt = _writer.commit(tmp, step, root)
    _writer.housekeeping(root, step)
    return ckpt


# -- copy mode -------------------------------------------------------------------------------
def _stage(
    items: Sequence[tuple[str, memoryview | bytes]],
) -> tuple[list[tuple[str, memoryview | bytes]], dict[str, mmap.mmap]]:
    """Private copies of ``items`` in the staging buffers (``_staging``); returns them and
    the buffers used, which :func:`_staging.keep` keeps for the next save."""
    staged: list[tuple[str, memoryview | bytes]] = []
    used: dict[str, mmap.mmap] = {}
    try:
        for rel, data in items:
            src = flat(data)
            if isinstance(src, bytes):  # immutable, or a private copy already
                staged.append((rel, src))
                continue
            if not src.nbytes:
                staged.append((rel, b""))
                continue
            buf = _staging.take(rel, src.nbytes)
            used[rel] = buf
            _copy_into(buf, src)
            staged.append((rel, memoryview(buf)[: src.nbytes]))
    except BaseException:
        release_views(staged)
        _staging.keep(used)
        raise
    return staged, used


def _start_copy(
    job: AsyncSave,
    items: list[tuple[str, memoryview | bytes]] | None,
    writer: Writer | None,
    *,
    background: bool,
) -> bool:
    """Start a copy-mode save; True when the background thread took over ``items``'
    views (``background``: it releases them once it has copied them)."""
    if items is not None:
        staged: list[tuple[str, memoryview | bytes]] = []
        used: dict[str, mmap.mmap] = {}
        if not background:
            staged, used = _stage(items)
            job._staged.set()

        def run() -> None:
            nonlocal staged, used
            result: Checkpoint | None = None
            error: BaseException | None = None
            try:
                if background:
                    try:
                        staged, used = _stage(items)
                    finally:
                        release_views(items)
                    job._staged.set()
                result = _save_items(job.step, job.root, staged, None)
            except BaseException as exc:
                error = exc
            finally:
                release_views(staged)
                _staging.keep(used)
            job._finish(result, error)

    else:
        assert writer is not None
        tmp = _writer.new_tmp_dir(job.root, job.step)
        if not background:
            with _writer.discarded_on_error(tmp, job.step, job.root, user_code=True):
                writer(tmp)
            job._staged.set()

        def run() -> None:
            result: Checkpoint | None = None
            error: BaseException | None = None
            try:
                if background:
                    try:
                        writer(tmp)
                    except BaseException as exc:
                        error = _writer.fail(tmp, exc, job.step, job.root, user_code=True)
                        return
                    job._staged.set()
                try:
                    result = _writer.commit(tmp, job.step, job.root)
                except BaseException as exc:
                    error = _writer.fail(tmp, exc, job.step, job.root, user_code=False)
                else:
                    _writer.housekeeping(job.root, job.step)
            finally:
                job._finish(result, error)

    # Not a daemon: the interpreter waits for it at exit, so a script that ends right after
    # save_async() still leaves the checkpoint on disk.
    threading.Thread(target=run, name=f"taugrid-ckpt-{job.step}").start()
    return items is not None and background


# -- fork mode -------------------------------------------------------------------------------
def _start_fork(
    job: AsyncSave, items: list[tuple[str, memoryview | bytes]] | None, writer: Writer | None
) -> None:
    r, w = os.pipe()
    try:
        with warnings.catch_warnings():
            # Python >= 3.12 warns about fork() in a multi-threaded process; the child here
            # uses no lock another thread could hold (see the module docstring).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    if pid == 0:
        _child(r, w, job.step, job.root, items, writer)
    os.close(w)
    job.pid = pid
    threading.Thread(
        target=_wait_child, args=(job, pid, r), name=f"taugrid-ckpt-{job.step}"
    ).start()


def _child(
    r: int,
    w: int,
    step: int,
    root: Path,
    items: list[tuple[str, memoryview | bytes]] | None,
    writer: Writer | None,
) -> NoReturn:
    code = 70
    try:
        os.close(r)
        # A Ctrl-C meant for the training loop must not cut the checkpoint short. SIGTERM
        # keeps the parent's handler (taugrid.should_stop's flag, or the default).
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        _writer.after_fork_in_child()
        try:
            ckpt = _save_items(step, root, items, writer)
            payload = b"K" + json.dumps(_ckpt_doc(ckpt)).encode()
            code = 0
        except BaseException as exc:
            payload = b"E" + _pack_error(exc)
            code = 1
        _send(w, payload)
    finally:
        os._exit(code)


def _pack_error(exc: BaseException) -> bytes:
    tb = "".join(traceback.format_exception(exc))
    blob: bytes | None = None
    try:
        pickled = pickle.dumps(exc)
        pickle.loads(pickled)  # some exceptions pickle but do not unpickle
        blob = pickled
    except Exception:
        pass
    return pickle.dumps((blob, type(exc).__name__, str(exc), tb))


def _unpack_error(data: bytes, pid: int) -> BaseException:
    try:
        blob, name, message, tb = pickle.loads(data)
        exc: BaseException = CheckpointError(f"{name}: {message}")
        if blob is not None:
            exc = pickle.loads(blob)
    except Exception as err:
        return CheckpointError(f"the checkpoint writer process {pid} failed: {err}")
    exc.add_note(f"raised in the checkpoint writer process {pid}:\n{tb.rstrip()}")
    return exc


def _send(fd: int, payload: bytes) -> None:
    _writer.write_all(fd, _HEADER.pack(len(payload)) + payload)


def _read_exact(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _wait_child(job: AsyncSave, pid: int, r: int) -> None:
    result: Checkpoint | None = None
    error: BaseException | None = None
    try:
        try:
            header = _read_exact(r, _HEADER.size)
            payload = _read_exact(r, _HEADER.unpack(header)[0]) if len(header) == 8 else b""
        finally:
            os.close(r)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = None  # reaped by someone else's os.wait()
        if payload[:1] == b"K":
            result = _ckpt_from_doc(json.loads(payload[1:]))
        elif payload[:1] == b"E":
            error = _unpack_error(payload[1:], pid)
        else:
            if status is not None and os.WIFSIGNALED(status):
                how = f"was killed by signal {os.WTERMSIG(status)}"
            elif status is not None:
                how = f"exited with code {os.waitstatus_to_exitcode(status)}"
            else:
                how = "ended"
            error = CheckpointError(
                f"checkpoint step {job.step}: the writer process {pid} {how} before finishing; "
                "older checkpoints are intact"
            )
            _writer.cleanup_stale(job.root)
    except BaseException as exc:
        error = exc
    job._finish(result, error)


def _ckpt_doc(ckpt: Checkpoint) -> dict[str, Any]:
    return {
        "path": str(ckpt.path),
        "step": ckpt.step,
        "time": ckpt.time,
        "attempt": ckpt.attempt,
        "size": ckpt.size,
        "files": [[f.path, f.size, f.sha256] for f in ckpt.files],
    }


def _ckpt_from_doc(doc: dict[str, Any]) -> Checkpoint:
    return Checkpoint(
        path=Path(doc["path"]),
        step=doc["step"],
        time=doc["time"],
        attempt=doc["attempt"],
        size=doc["size"],
        files=tuple(FileEntry(p, s, h) for p, s, h in doc["files"]),
    )
