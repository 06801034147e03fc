"""The write side: temporary directory, commit (hash, fsync, manifest, rename), pruning and
removal of what crashed writers left. Stdlib only.

Crash safety comes from the order of operations in :func:`commit`: every file and the
manifest are fsynced, then every directory of the temporary tree, and only then is the
tree renamed to ``step-%010d`` (one atomic rename) and the root fsynced. A reader lists
only ``step-*`` names and requires a manifest that verifies, so a ``kill -9`` or power
loss at any point leaves either the previous set of checkpoints or the new complete one.

:func:`write_files` is the fast path for buffers: O_DIRECT writes (no page-cache copy),
sha256 in other threads meanwhile, fsync per file as soon as it is written, and a record
of the digests so that :func:`commit` does not read those files again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from taugrid.sdk._store import (
    DEFAULT_KEEP,
    ENV_KEEP,
    MANIFEST,
    Checkpoint,
    CheckpointError,
    CheckpointWriteError,
    FileEntry,
    Manifest,
    check_rel_path,
    env_attempt,
    env_run_id,
    hash_workers,
    inspect,
    run_parallel,
    sha256_file,
    step_dir_name,
    step_dirs,
    verify,
)

# One commit (or one async save, from start to end) at a time in this process. A plain
# Lock, not an RLock: an async save takes it in the caller and releases it in its waiter.
slot = threading.Lock()
# Names of the temporary directories this process is writing right now.
own_tmp: set[str] = set()
_own_lock = threading.Lock()
_warned: set[str] = set()

_TMP_KINDS = ("step", "old", "del")
FOREIGN_TMP_MAX_AGE_S = 24 * 3600.0  # another host's leftovers: removed after a day
_WRITE_CHUNK = 64 << 20
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def warn_once(key: str, message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    try:
        sys.stderr.write(f"taugrid: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def after_fork_in_child() -> None:
    """Fresh locks in a forked writer: the parent's may be held by threads that the
    child does not have."""
    global slot, _own_lock, _prehashed_lock
    slot = threading.Lock()
    _own_lock = threading.Lock()
    _prehashed_lock = threading.Lock()
    own_tmp.clear()
    _prehashed.clear()


# -- names ---------------------------------------------------------------------------------
def host_tag() -> str:
    """8 hex digits naming this host in temporary names: only this host may judge
    whether the pid in such a name is alive."""
    return hashlib.sha256(os.uname().nodename.encode()).hexdigest()[:8]


def tmp_name(kind: str, step: int) -> str:
    return f".tmp-{kind}-{step:010d}-{os.getpid()}-{host_tag()}{os.urandom(4).hex()}"


def parse_tmp_name(name: str) -> tuple[str, int, int, str] | None:
    """(kind, step, pid, host tag) of a temporary name, else None."""
    if not name.startswith(".tmp-"):
        return None
    parts = name[5:].split("-")
    if len(parts) != 4 or parts[0] not in _TMP_KINDS:
        return None
    kind, step_s, pid_s, tail = parts
    if not (step_s.isdigit() and pid_s.isdigit() and len(tail) == 16):
        return None
    try:
        int(tail, 16)
    except ValueError:
        return None
    return kind, int(step_s), int(pid_s), tail[:8]


# -- low-level durability ------------------------------------------------------------------
def fsync_path(path: Path | str, *, directory: bool = False) -> None:
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():  # a plain file, or something rmtree could not remove
        try:
            path.unlink()
        except OSError:
            shutil.rmtree(path, ignore_errors=True)


def make_dirs_durably(path: Path) -> None:
    """``mkdir -p`` that also fsyncs the parent of every directory it creates, so the
    checkpoint root itself survives a power loss."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for p in reversed(missing):
        fsync_path(p.parent, directory=True)


def free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):
        try:
            st = os.statvfs(p)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def human(n: int | None) -> str:
    if n is None:
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def write_error(
    exc: OSError, step: int, root: Path, size: int | None = None
) -> CheckpointWriteError:
    """The error to raise for an OSError met while writing checkpoint ``step``."""
    if isinstance(exc, CheckpointWriteError):
        return exc
    code = exc.errno if exc.errno is not None else errno.EIO
    if code in NO_SPACE:
        what = "no space left" if code == errno.ENOSPC else "disk quota exceeded"
        so_far = f"; the checkpoint had reached {human(size)}" if size else ""
        msg = (
            f"checkpoint step {step}: {what} on the filesystem of {root} "
            f"({human(free_bytes(root))} free after discarding the partial checkpoint{so_far}); "
            "older checkpoints are intact"
        )
    else:
        where = exc.filename or root
        msg = f"checkpoint step {step}: writing {where} failed: {exc.strerror or exc}"
    return CheckpointWriteError(code, msg)


# -- the temporary directory ---------------------------------------------------------------
def new_tmp_dir(root: Path, step: int) -> Path:
    path = root / tmp_name("step", step)
    with _own_lock:
        own_tmp.add(path.name)
    try:
        if not root.is_dir():
            make_dirs_durably(root)
        path.mkdir()
    except OSError as exc:
        with _own_lock:
            own_tmp.discard(path.name)
        raise write_error(exc, step, root) from exc
    return path


def discard(tmp: Path) -> None:
    remove_tree(tmp)
    forget_prehashed(tmp)
    with _own_lock:
        own_tmp.discard(tmp.name)


def fail(tmp: Path, exc: BaseException, step: int, root: Path, *, user_code: bool) -> BaseException:
    """Discard ``tmp`` after ``exc``; return the exception to raise. OSErrors of the SDK's
    own writing become :class:`CheckpointWriteError`; of the user's code (the ``with``
    block, a writer callable) only "disk full" does, anything else propagates as it is."""
    size = tree_size(tmp)
    discard(tmp)
    if not isinstance(exc, OSError) or isinstance(exc, CheckpointWriteError):
        return exc
    if user_code and exc.errno not in NO_SPACE:
        return exc
    err = write_error(exc, step, root, size)
    err.__cause__ = exc
    return err


@contextlib.contextmanager
def discarded_on_error(tmp: Path, step: int, root: Path, *, user_code: bool) -> Iterator[None]:
    """Run the body; on any exception discard ``tmp`` and raise what :func:`fail` says."""
    try:
        yield
    except BaseException as exc:
        err = fail(tmp, exc, step, root, user_code=user_code)
        if err is exc:
            raise
        raise err from exc


def tree_size(tmp: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(tmp):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def collect(tmp: Path) -> tuple[list[tuple[str, Path, os.stat_result]], list[Path]]:
    """Files (relative posix path, path, lstat) sorted by path, and every directory of the
    tree (deepest first). Only regular files and directories are allowed."""
    files: list[tuple[str, Path, os.stat_result]] = []
    dirs: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(tmp):
        base = Path(dirpath)
        dirs.append(base)
        for name in (*dirnames, *filenames):
            p = base / name
            st = os.lstat(p)
            rel = p.relative_to(tmp).as_posix()
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                raise CheckpointError(
                    f"{rel} in the checkpoint is {kind}; checkpoints hold regular files only"
                )
            if rel == MANIFEST:
                raise CheckpointError(f"the file name {MANIFEST} is reserved for the manifest")
            files.append((rel, p, st))
    files.sort(key=lambda f: f[0])
    dirs.sort(key=lambda d: len(d.parts), reverse=True)
    return files, dirs


# Files written by write_files(): path -> (inode, size, mtime_ns, sha256, fsynced). commit()
# trusts an entry only while the file's identity still matches.
_prehashed: dict[str, tuple[int, int, int, str, bool]] = {}
_prehashed_lock = threading.Lock()


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


def forget_prehashed(tmp: Path) -> None:
    prefix = str(tmp) + os.sep
    with _prehashed_lock:
        for key in [k for k in _prehashed if k.startswith(prefix)]:
            del _prehashed[key]


# -- commit --------------------------------------------------------------------------------
def commit(tmp: Path, step: int, root: Path) -> Checkpoint:
    """Hash, fsync and describe every file of ``tmp``, write the manifest, rename ``tmp``
    to ``root/step-%010d`` (replacing a same-step checkpoint) and fsync ``root``.

    Files that :func:`write_files` wrote (and hashed and fsynced while writing) are not
    read again. For the others, fsync (one thread) and sha256 (other threads) overlap.
    """
    files, dirs = collect(tmp)
    digests: dict[str, str] = {}
    to_hash: list[tuple[str, Path, int]] = []
    to_sync: list[Path] = []
    with _prehashed_lock:
        for rel, p, st in files:
            pre = _prehashed.get(str(p))
            if pre is not None and pre[:3] == _identity(st):
                digests[rel] = pre[3]
                if not pre[4]:
                    to_sync.append(p)
            else:
                to_hash.append((rel, p, st.st_size))
                to_sync.append(p)

    def fsync_all() -> None:
        for p in to_sync:
            fsync_path(p)

    def hasher(rel: str, p: Path) -> Callable[[], None]:
        def run() -> None:
            digests[rel] = sha256_file(p)

        return run

    to_hash.sort(key=lambda item: -item[2])  # biggest first
    jobs: list[Callable[[], None]] = [fsync_all] if to_sync else []
    workers = len(jobs)
    if to_hash:
        jobs += [hasher(rel, p) for rel, p, _ in to_hash]
        workers += hash_workers(sum(size for *_, size in to_hash), len(to_hash))
    run_parallel(jobs, workers)
    forget_prehashed(tmp)

    entries = tuple(FileEntry(rel, st.st_size, digests[rel]) for rel, _, st in files)
    manifest = Manifest(
        step=step,
        time=time.time(),
        attempt=env_attempt(),
        run_id=env_run_id(),
        files=entries,
        total_size=sum(e.size for e in entries),
    )
    fd = os.open(tmp / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, manifest.to_json())
        os.fsync(fd)
    finally:
        os.close(fd)
    for d in dirs:
        fsync_path(d, directory=True)
    final = root / step_dir_name(step)
    install(tmp, final, step)
    with _own_lock:
        own_tmp.discard(tmp.name)
    return Checkpoint(
        path=final,
        step=step,
        time=manifest.time,
        attempt=manifest.attempt,
        size=manifest.total_size,
        files=entries,
    )


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view[:_WRITE_CHUNK])
        view = view[n:]


def install(tmp: Path, final: Path, step: int) -> None:
    """Rename ``tmp`` to ``final``; if ``final`` exists (same step saved again), move it
    aside first, then delete it. A crash in between leaves the old one aside under a
    ``.tmp-old-`` name, which the next writer renames back if ``final`` is still missing."""
    root = final.parent
    for _ in range(20):
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        else:
            fsync_path(root, directory=True)
            return
        aside = root / tmp_name("old", step)
        with _own_lock:
            own_tmp.add(aside.name)
        try:
            try:
                os.rename(final, aside)
            except FileNotFoundError:
                continue  # another writer moved it meanwhile: try again
            try:
                os.rename(tmp, final)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    remove_tree(aside)  # another writer installed the same step meanwhile
                    continue
                os.rename(aside, final)  # keep the old one
                raise
            fsync_path(root, directory=True)
            remove_tree(aside)
            fsync_path(root, directory=True)
            return
        finally:
            with _own_lock:
                own_tmp.discard(aside.name)
    raise CheckpointError(f"could not install {final}: other writers keep replacing it")


# -- housekeeping --------------------------------------------------------------------------
def keep_from_env() -> int:
    raw = os.environ.get(ENV_KEEP)
    if raw is None or raw == "":
        return DEFAULT_KEEP
    try:
        keep = int(raw)
    except ValueError:
        keep = 0
    if keep < 1:
        warn_once(
            "keep", f"{ENV_KEEP}={raw!r} is not an integer >= 1; keeping {DEFAULT_KEEP} checkpoints"
        )
        return DEFAULT_KEEP
    return keep


def prune(root: Path, keep: int, written: int) -> list[Path]:
    """Keep the ``keep`` newest checkpoints that verify (sizes; no hashing) and the one just
    written (step ``written``); remove everything older than the oldest of those, corrupt
    ones included. Corrupt ones newer than that are left for the server to report."""
    infos = [inspect(p, step, full=False) for step, p in step_dirs(root)]
    kept = {i.step for i in infos if i.verified}
    kept = set(sorted(kept, reverse=True)[:keep]) | {written}
    oldest = min(kept)
    removed: list[Path] = []
    for info in infos:
        if info.step < oldest and info.step not in kept:
            remove_checkpoint(info.path, info.step)
            removed.append(info.path)
    return removed


def remove_checkpoint(path: Path, step: int) -> None:
    """Rename out of the ``step-*`` namespace first, so no reader sees it half deleted."""
    doomed = path.parent / tmp_name("del", step)
    with _own_lock:
        own_tmp.add(doomed.name)
    try:
        try:
            os.rename(path, doomed)
        except FileNotFoundError:
            return
        fsync_path(path.parent, directory=True)
        remove_tree(doomed)
    finally:
        with _own_lock:
            own_tmp.discard(doomed.name)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process. A zombie is dead: a killed writer whose parent
    died too may wait a long time to be reaped (containers whose PID 1 reaps nothing)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read()
    except OSError:
        return True  # no /proc (not Linux) or it vanished meanwhile: assume alive
    # "pid (comm) state ...": comm may hold spaces and parentheses; state follows the last ")"
    state = stat_line[stat_line.rfind(b")") + 2 : stat_line.rfind(b")") + 3]
    return state not in (b"Z", b"X")


def cleanup_stale(root: Path) -> list[str]:
    """Remove temporary directories of dead writers on this host; restore a same-step
    checkpoint that a writer moved aside and died before putting the new one in place.
    Another host's leftovers are removed only once a day old (its pids mean nothing here).
    """
    me, tag = os.getpid(), host_tag()
    done: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return done
    for entry in entries:
        parsed = parse_tmp_name(entry.name)
        if parsed is None:
            continue
        kind, step, pid, host = parsed
        with _own_lock:
            if entry.name in own_tmp:
                continue
        if host == tag:
            # Our own pid with a name we are not writing: left by an earlier process that
            # had the same pid (pids repeat across container restarts).
            if pid != me and pid_alive(pid):
                continue
        else:
            try:
                age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if age < FOREIGN_TMP_MAX_AGE_S:
                continue
        path = Path(entry.path)
        if kind == "old":
            final = root / step_dir_name(step)
            if not final.exists() and verify(path, full=False) is None:
                try:
                    os.rename(path, final)
                    fsync_path(root, directory=True)
                    done.append(f"restored {final.name}")
                    continue
                except OSError:
                    pass
        remove_tree(path)
        done.append(f"removed {entry.name}")
    return done


def housekeeping(root: Path, written: int) -> None:
    """Prune and clean after a commit. Never fails the save: the checkpoint is durable."""
    try:
        prune(root, keep_from_env(), written)
        cleanup_stale(root)
    except OSError as exc:
        warn_once("housekeeping", f"checkpoint pruning in {root} failed: {exc}")


# -- writing buffers -------------------------------------------------------------------------
# Big buffers are written with O_DIRECT through two page-aligned bounce buffers (one filled
# while the other is written): no copy into the page cache, no dirty-page writeback and
# throttling, a fraction of the kernel CPU time, which on a small machine is what the
# hashing threads need. Filesystems or devices that refuse it get plain writes.
ENV_DIRECT = "TAU_CHECKPOINT_DIRECT"  # "0": never use O_DIRECT
DIRECT_MIN = 4 << 20  # smaller files: plain writes
DIRECT_CHUNK = 8 << 20
DIRECT_ALIGN = 4096
_no_direct_devs: set[int] = set()  # filesystems that refused O_DIRECT


def direct_wanted(directory: Path, size: int) -> bool:
    if size < DIRECT_MIN or not hasattr(os, "O_DIRECT"):
        return False
    if os.environ.get(ENV_DIRECT, "1") == "0":
        return False
    try:
        return os.stat(directory).st_dev not in _no_direct_devs
    except OSError:
        return False


def write_one(path: Path, data: memoryview | bytes) -> int:
    """Create ``path`` with ``data``; returns the open fd (not yet fsynced)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    if direct_wanted(path.parent, len(data)):
        try:
            fd = os.open(path, flags | os.O_DIRECT, 0o644)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            _no_direct_devs.add(os.stat(path.parent).st_dev)
        else:
            try:
                write_direct(fd, data)
                return fd
            except OSError as exc:
                os.close(fd)
                if exc.errno != errno.EINVAL:
                    raise
                # The device wants another alignment: start this file again, plainly.
                _no_direct_devs.add(os.stat(path.parent).st_dev)
                path.unlink()
    fd = os.open(path, flags, 0o644)
    try:
        write_all(fd, data)
    except BaseException:
        os.close(fd)
        raise
    return fd


def aligned_address(data: memoryview | bytes) -> int | None:
    """The address of ``data`` when O_DIRECT may read it in place (a writable buffer
    starting on a DIRECT_ALIGN boundary, such as copy mode's staging mmap), else None."""
    if not isinstance(data, memoryview) or data.readonly or not data.nbytes:
        return None
    try:
        import ctypes

        anchor = ctypes.c_char.from_buffer(data)
    except (ImportError, TypeError, ValueError):
        return None
    try:
        address = ctypes.addressof(anchor)
    finally:
        del anchor  # release the export at once
    return address if address % DIRECT_ALIGN == 0 else None


def write_direct(fd: int, data: memoryview | bytes) -> None:
    """Write ``data`` to the O_DIRECT ``fd`` in aligned chunks. A page-aligned buffer is
    written in place (:func:`write_in_place`); any other goes through two bounce buffers,
    the caller thread copying into one while a thread writes the other. The last chunk is
    padded to the alignment and the file truncated back to its size."""
    import mmap
    import queue

    if aligned_address(data) is not None:
        assert isinstance(data, memoryview)
        write_in_place(fd, data)
        return
    size = len(data)
    # Private mappings: a forked writer must never share them with its parent.
    bounce = [
        mmap.mmap(-1, DIRECT_CHUNK, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) for _ in range(2)
    ]
    free: queue.SimpleQueue[int] = queue.SimpleQueue()
    full: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    free.put(0)
    free.put(1)
    errors: list[BaseException] = []

    def writer() -> None:
        while (item := full.get()) is not None:
            index, length = item
            try:
                if not errors:
                    with memoryview(bounce[index]) as whole, whole[:length] as chunk:
                        done = os.write(fd, chunk)
                        if done != length:  # a short O_DIRECT write: the disk is full
                            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except BaseException as exc:
                errors.append(exc)
            finally:
                free.put(index)

    thread = threading.Thread(target=writer, name="taugrid-ckpt-direct", daemon=True)
    thread.start()
    try:
        with memoryview(data) as view:
            for off in range(0, size, DIRECT_CHUNK):
                index = free.get()
                if errors:
                    break
                n = min(DIRECT_CHUNK, size - off)
                padded = -(-n // DIRECT_ALIGN) * DIRECT_ALIGN
                buf = bounce[index]
                buf[:n] = view[off : off + n]
                if padded != n:
                    buf[n:padded] = bytes(padded - n)
                full.put((index, padded))
    finally:
        full.put(None)
        thread.join()
        for buf in bounce:
            buf.close()
    if errors:
        raise errors[0]
    if size % DIRECT_ALIGN:
        os.ftruncate(fd, size)


def write_in_place(fd: int, view: memoryview) -> None:
    """O_DIRECT writes straight from the page-aligned ``view``: no copy at all, except the
    last partial block, padded in a one-page buffer."""
    import mmap

    size = view.nbytes
    whole = size - size % DIRECT_ALIGN
    for off in range(0, whole, DIRECT_CHUNK):
        n = min(DIRECT_CHUNK, whole - off)
        with view[off : off + n] as chunk:
            if os.write(fd, chunk) != n:  # a short O_DIRECT write: the disk is full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if whole == size:
        return
    with mmap.mmap(-1, DIRECT_ALIGN, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as tail:
        tail[: size - whole] = view[whole:size]
        with memoryview(tail) as block:
            if os.write(fd, block) != DIRECT_ALIGN:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    os.ftruncate(fd, size)


def write_files(
    directory: Path, items: Sequence[tuple[str, memoryview | bytes]]
) -> list[FileEntry]:
    """Write each buffer to ``directory/<rel>`` while other threads hash the buffers, and
    fsync each file as soon as it is written; :func:`commit` then reads none of them again.
    ``items`` hold bytes-shaped (1-D, unsigned byte) views."""
    digests: dict[str, str] = {}

    def hasher(rel: str, data: memoryview | bytes) -> Callable[[], None]:
        def run() -> None:
            digests[rel] = hashlib.sha256(data).hexdigest()

        return run

    total = sum(len(d) for _, d in items)
    workers = hash_workers(total, len(items))
    hash_jobs = [hasher(rel, d) for rel, d in sorted(items, key=lambda it: -len(it[1]))]
    hash_error: list[BaseException] = []

    def hash_all() -> None:
        try:
            run_parallel(hash_jobs, workers)
        except BaseException as exc:
            hash_error.append(exc)

    hashing = threading.Thread(target=hash_all, name="taugrid-ckpt-hash", daemon=True)
    hashing.start()
    identities: dict[str, tuple[int, int, int]] = {}
    synced: set[str] = set()
    sync_error: list[BaseException] = []
    queue: list[tuple[str, int] | None] = []
    cond = threading.Condition()

    def sync_loop() -> None:
        while True:
            with cond:
                while not queue:
                    cond.wait()
                item = queue.pop(0)
            if item is None:
                return
            path, fd = item
            try:
                if not sync_error:
                    os.fsync(fd)
                    synced.add(path)
            except BaseException as exc:
                sync_error.append(exc)
            finally:
                os.close(fd)

    syncer = threading.Thread(target=sync_loop, name="taugrid-ckpt-fsync", daemon=True)
    syncer.start()
    try:
        for rel, data in items:
            why = check_rel_path(rel)
            if why is not None:
                raise ValueError(why)
            p = directory / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            fd = write_one(p, data)
            try:
                identities[str(p)] = _identity(os.fstat(fd))
            except BaseException:
                os.close(fd)
                raise
            with cond:
                queue.append((str(p), fd))
                cond.notify()
            if sync_error:
                break
    finally:
        with cond:
            queue.append(None)
            cond.notify()
        syncer.join()
        hashing.join()
    for err in (*sync_error, *hash_error):
        raise err
    with _prehashed_lock:
        for rel, _ in items:
            key = str(directory / rel)
            _prehashed[key] = (*identities[key], digests[rel], key in synced)
    return [FileEntry(rel, len(data), digests[rel]) for rel, data in items]
