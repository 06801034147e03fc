"""Checkpoint layout, manifest format and the read side (verify, scan). Stdlib only.

Layout under the checkpoint root (``$TAU_CHECKPOINT_DIR``)::

    step-0000001234/             a committed checkpoint: the user's files + the manifest
        tau-checkpoint.json
        ...
    .tmp-step-0000001240-<pid>-<host8><rand8>/   being written (ignored by readers)
    .tmp-old-0000001234-<pid>-<host8><rand8>/    a same-step checkpoint moved aside
    .tmp-del-0000001100-<pid>-<host8><rand8>/    a pruned checkpoint being deleted

A directory ``step-N`` without a manifest that verifies does not exist as a checkpoint.
The server imports :func:`verify`, :func:`list_checkpoints` and :func:`newest_verified`
from here (through ``taugrid.sdk.checkpoint``), so this module stays stdlib-only.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

MANIFEST = "tau-checkpoint.json"
FORMAT = 1
ENV_DIR = "TAU_CHECKPOINT_DIR"
ENV_RESUME = "TAU_RESUME_FROM"
# Checkpoints written after this time (epoch seconds; a hardware fault) are not resumed
# from: set where the server could not choose for itself (a cluster volume it cannot see).
ENV_RESUME_BEFORE = "TAU_RESUME_BEFORE"
ENV_ATTEMPT = "TAU_ATTEMPT"
ENV_RUN_ID = "TAU_RUN_ID"
ENV_KEEP = "TAU_CHECKPOINT_KEEP"
DEFAULT_KEEP = 3

STEP_DIR_RE = re.compile(r"step-(\d{10,})\Z")
_SHA_RE = re.compile(r"[0-9a-f]{64}\Z")
_HASH_BUF = 1 << 20  # bytes read per call while hashing a file (fits in L2)
_PARALLEL_HASH_MIN = 64 << 20  # below this, hashing in threads is not worth it
P = TypeVar("P")  # where a checkpoint directory is: a Path here, a key in a bucket elsewhere


# -- errors --------------------------------------------------------------------------------
class CheckpointError(Exception):
    """Base of every checkpoint error the SDK raises."""


class CheckpointDirNotSet(CheckpointError, RuntimeError):
    """No ``root`` was given and ``$TAU_CHECKPOINT_DIR`` is not set."""


class CheckpointWriteError(CheckpointError, OSError):
    """Writing a checkpoint failed (disk full, I/O error); older checkpoints are intact.

    An :class:`OSError`: ``errno`` is the original one (``ENOSPC`` when the disk is full).
    """


# -- records -------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileEntry:
    """One file of a checkpoint: path relative to the checkpoint (posix), size, sha256."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Checkpoint:
    """A committed checkpoint whose manifest verified."""

    path: Path
    step: int
    time: float
    attempt: int | None
    size: int
    files: tuple[FileEntry, ...]


@dataclass(frozen=True)
class CheckpointInfo:
    """What :func:`list_checkpoints` knows about one ``step-*`` directory.

    ``verified`` is whether the manifest verified (at the level asked: sizes only, or full
    sha256); ``problem`` says why it is not usable (corrupt, or skipped by
    :func:`newest_verified`), else None. Manifest fields are None/0/() when it is unreadable.
    """

    step: int
    path: Path
    time: float | None
    attempt: int | None
    run_id: str | None
    size: int
    file_count: int
    files: tuple[FileEntry, ...]
    verified: bool
    problem: str | None

    def to_checkpoint(self) -> Checkpoint:
        return Checkpoint(
            path=self.path,
            step=self.step,
            time=self.time if self.time is not None else 0.0,
            attempt=self.attempt,
            size=self.size,
            files=self.files,
        )


@dataclass(frozen=True)
class Manifest:
    step: int
    time: float
    attempt: int | None
    run_id: str | None
    files: tuple[FileEntry, ...]
    total_size: int

    def to_json(self) -> bytes:
        doc = {
            "format": FORMAT,
            "step": self.step,
            "time": self.time,
            "attempt": self.attempt,
            "run_id": self.run_id,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
            "total_size": self.total_size,
        }
        return (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode()


# -- names and environment -------------------------------------------------------------------
def check_step(step: object) -> int:
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"checkpoint step must be an int, not {type(step).__name__}")
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return int(step)


def step_dir_name(step: int) -> str:
    return f"step-{step:010d}"


def parse_step_dir(name: str) -> int | None:
    """The step of a canonical ``step-%010d`` name, else None."""
    m = STEP_DIR_RE.match(name)
    if m is None:
        return None
    step = int(m.group(1))
    return step if name == step_dir_name(step) else None


def resolve_root(root: str | os.PathLike[str] | None) -> Path:
    if root is not None:
        return Path(root)
    env = os.environ.get(ENV_DIR)
    if not env:
        raise CheckpointDirNotSet(
            f"${ENV_DIR} is not set and no root= was given: run under `tau run` (which sets "
            f"it), export {ENV_DIR}=/some/dir, or pass root=... explicitly"
        )
    return Path(env)


def env_attempt() -> int | None:
    try:
        return int(os.environ[ENV_ATTEMPT])
    except (KeyError, ValueError):
        return None


def env_run_id() -> str | None:
    return os.environ.get(ENV_RUN_ID) or None


# -- hashing -------------------------------------------------------------------------------
def sha256_file(path: str | os.PathLike[str]) -> str:
    """sha256 of a file, read in 1 MiB chunks (hashlib drops the GIL on each chunk)."""
    h = hashlib.sha256()
    buf = bytearray(_HASH_BUF)
    view = memoryview(buf)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while True:
            n = os.readv(fd, [buf])
            if not n:
                break
            h.update(view[:n])
    finally:
        os.close(fd)
    return h.hexdigest()


def run_parallel(jobs: Sequence[Callable[[], None]], workers: int) -> None:
    """Run ``jobs`` on up to ``workers`` threads; re-raise the first error after all stop."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            job()
        return
    it = iter(jobs)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while not errors:
            with lock:
                job = next(it, None)
            if job is None:
                return
            try:
                job()
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [
        threading.Thread(target=work, name="taugrid-ckpt", daemon=True)
        for _ in range(min(workers, len(jobs)))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def hash_workers(total_bytes: int, files: int) -> int:
    if total_bytes < _PARALLEL_HASH_MIN:
        return 1
    return max(1, min(4, os.cpu_count() or 1, files))


# -- manifest ------------------------------------------------------------------------------
def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def check_rel_path(p: object) -> str | None:
    """Why ``p`` is not an acceptable relative file path inside a checkpoint, else None."""
    if not isinstance(p, str) or not p:
        return "a file path must be a non-empty string"
    if p.startswith("/") or "\\" in p or "\0" in p:
        return f"file path {p!r} must be relative, with / separators"
    parts = p.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"file path {p!r} must not contain empty, '.' or '..' parts"
    if p == MANIFEST:
        return f"the file name {MANIFEST} is reserved for the manifest"
    return None


def parse_manifest(raw: bytes) -> tuple[Manifest | None, str | None]:
    """(manifest, None) or (None, a sentence saying what is wrong with it)."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        return None, f"manifest {MANIFEST} is not valid JSON ({exc})"
    bad = f"manifest {MANIFEST} is malformed: "
    if not isinstance(doc, dict):
        return None, bad + "not a JSON object"
    if doc.get("format") != FORMAT:
        return None, bad + f"unsupported format {doc.get('format')!r} (expected {FORMAT})"
    step, at, attempt, run_id = doc.get("step"), doc.get("time"), doc.get("attempt"), None
    if not _is_int(step) or step < 0:
        return None, bad + f"step {step!r} is not a non-negative integer"
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        return None, bad + f"time {at!r} is not a number"
    if attempt is not None and not _is_int(attempt):
        return None, bad + f"attempt {attempt!r} is not an integer or null"
    run_id = doc.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        return None, bad + f"run_id {run_id!r} is not a string or null"
    files_doc = doc.get("files")
    if not isinstance(files_doc, list):
        return None, bad + "'files' is not a list"
    files: list[FileEntry] = []
    seen: set[str] = set()
    for item in files_doc:
        if not isinstance(item, dict):
            return None, bad + "an entry of 'files' is not an object"
        path, size, sha = item.get("path"), item.get("size"), item.get("sha256")
        why = check_rel_path(path)
        if why is not None:
            return None, bad + why
        assert isinstance(path, str)
        if path in seen:
            return None, bad + f"file {path} is listed twice"
        seen.add(path)
        if not _is_int(size) or size < 0:
            return None, bad + f"size of file {path} is not a non-negative integer"
        if not isinstance(sha, str) or not _SHA_RE.match(sha):
            return None, bad + f"sha256 of file {path} is not 64 lowercase hex digits"
        files.append(FileEntry(path, size, sha))
    total = doc.get("total_size")
    if not _is_int(total) or total != sum(f.size for f in files):
        return None, bad + f"total_size {total!r} is not the sum of the file sizes"
    return Manifest(step, float(at), attempt, run_id, tuple(files), total), None


def read_manifest(path: Path) -> tuple[Manifest | None, str | None]:
    try:
        raw = (path / MANIFEST).read_bytes()
    except FileNotFoundError:
        if not path.exists():
            return None, f"{path} does not exist"
        if not path.is_dir():
            return None, f"{path} is not a directory"
        return None, f"missing manifest {MANIFEST}"
    except NotADirectoryError:
        return None, f"{path} is not a directory"
    except OSError as exc:
        return None, f"cannot read manifest {MANIFEST}: {exc.strerror or exc}"
    return parse_manifest(raw)


def entry_problem(f: FileEntry, size: int | None, *, regular: bool = True) -> str | None:
    """Why a listed file found with ``size`` (None: missing) does not match its entry.
    The rule every reader applies (this module on disk, the object store in a bucket)."""
    if size is None:
        return f"missing file {f.path}"
    if not regular:
        return f"file {f.path} is not a regular file"
    if size != f.size:
        return f"size mismatch of file {f.path}: manifest says {f.size} bytes, found {size}"
    return None


def digest_problem(f: FileEntry, sha256: str) -> str | None:
    return None if sha256 == f.sha256 else f"sha256 mismatch of file {f.path}"


def check_files(path: Path, files: Sequence[FileEntry], *, full: bool) -> str | None:
    """Presence and sizes of every file, then (``full``) their sha256; first problem wins."""
    for f in files:
        try:
            st = os.stat(path / f.path, follow_symlinks=False)
        except FileNotFoundError:
            return entry_problem(f, None)
        except OSError as exc:
            return f"cannot read file {f.path}: {exc.strerror or exc}"
        problem = entry_problem(f, st.st_size, regular=stat.S_ISREG(st.st_mode))
        if problem is not None:
            return problem
    if not full:
        return None
    digests: dict[str, str] = {}

    def job(entry: FileEntry) -> Callable[[], None]:
        def run() -> None:
            digests[entry.path] = sha256_file(path / entry.path)

        return run

    try:
        workers = hash_workers(sum(f.size for f in files), len(files))
        # Biggest first, so a big file does not start last and stretch the tail.
        order = sorted(files, key=lambda f: -f.size)
        run_parallel([job(f) for f in order], workers)
    except OSError as exc:
        return f"cannot read file {exc.filename or ''}: {exc.strerror or exc}"
    for f in files:
        problem = digest_problem(f, digests[f.path])
        if problem is not None:
            return problem
    return None


def verify(path: str | os.PathLike[str], *, full: bool = True) -> str | None:
    """None if the checkpoint at ``path`` is intact, else one sentence saying what is wrong.

    Checks: the manifest exists and is well-formed JSON of the expected shape; its step
    matches the directory name (when the name is ``step-%010d``); every listed file exists
    with the listed size; and, with ``full`` (the default), its sha256. ``full=False`` only
    stats files (cheap at any size); ``full=True`` reads every byte (about 1 GB/s per core,
    files hashed in parallel). Files not listed in the manifest are not checked.
    """
    p = Path(path)
    manifest, problem = read_manifest(p)
    if manifest is None:
        return problem
    named = parse_step_dir(p.name)
    if named is not None and named != manifest.step:
        return f"manifest step {manifest.step} does not match the directory name {p.name}"
    return check_files(p, manifest.files, full=full)


def inspect(path: Path, step: int, *, full: bool) -> CheckpointInfo:
    manifest, problem = read_manifest(path)
    return info_from_manifest(
        path, step, manifest, problem, lambda files: check_files(path, files, full=full)
    )


def info_from_manifest(
    path: Path,
    step: int,
    manifest: Manifest | None,
    problem: str | None,
    check: Callable[[Sequence[FileEntry]], str | None],
) -> CheckpointInfo:
    """The record of ``step``'s directory from its parsed manifest (or why there is none)
    and ``check`` of its files: where the files are (disk, a bucket) is the caller's."""
    if manifest is None:
        return CheckpointInfo(step, path, None, None, None, 0, 0, (), False, problem)
    if manifest.step != step:
        problem = f"manifest step {manifest.step} does not match the directory name {path.name}"
    else:
        problem = check(manifest.files)
    return CheckpointInfo(
        step=step,
        path=path,
        time=manifest.time,
        attempt=manifest.attempt,
        run_id=manifest.run_id,
        size=manifest.total_size,
        file_count=len(manifest.files),
        files=manifest.files,
        verified=problem is None,
        problem=problem,
    )


def step_dirs(root: Path) -> list[tuple[int, Path]]:
    """Every canonical ``step-*`` directory under ``root``, newest step first."""
    found: list[tuple[int, Path]] = []
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for entry in entries:
        step = parse_step_dir(entry.name)
        if step is None:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        found.append((step, Path(entry.path)))
    found.sort(key=lambda sp: sp[0], reverse=True)
    return found


def list_checkpoints(
    root: str | os.PathLike[str] | None = None, *, full: bool = False
) -> list[CheckpointInfo]:
    """Every ``step-*`` directory under ``root`` (default ``$TAU_CHECKPOINT_DIR``), newest
    step first, verified or not. ``full=False`` (default) checks presence and sizes only;
    ``full=True`` also hashes every file. A missing root gives ``[]``."""
    return [inspect(p, step, full=full) for step, p in step_dirs(resolve_root(root))]


def newest_verified(
    root: str | os.PathLike[str] | None = None,
    *,
    exclude_written_after: float | None = None,
    full: bool = True,
) -> tuple[CheckpointInfo | None, list[CheckpointInfo]]:
    """The checkpoint to resume from, and the newer ones skipped on the way.

    Walks ``step-*`` directories newest step first. One whose manifest time is later than
    ``exclude_written_after`` (a recorded hardware-fault time, epoch seconds) is skipped
    unhashed; one that does not verify (with ``full`` sha256 by default) is skipped; the
    first one left is returned. Skipped entries carry the reason in ``problem``. Only the
    returned checkpoint (and corrupt newer ones) are hashed, never older ones.
    """
    dirs = step_dirs(resolve_root(root))
    return pick_resume(
        dirs,
        lambda p, step, full_: inspect(p, step, full=full_),
        exclude_written_after=exclude_written_after,
        full=full,
    )


def pick_resume(
    dirs: Sequence[tuple[int, P]],
    inspect_one: Callable[[P, int, bool], CheckpointInfo],
    *,
    exclude_written_after: float | None,
    full: bool,
) -> tuple[CheckpointInfo | None, list[CheckpointInfo]]:
    """:func:`newest_verified`'s walk over ``dirs`` (newest step first), wherever they
    are: ``inspect_one(where, step, full)`` reads one (disk here, a bucket elsewhere)."""
    skipped: list[CheckpointInfo] = []
    for step, p in dirs:
        if exclude_written_after is not None:
            quick = inspect_one(p, step, False)
            if quick.time is not None and quick.time > exclude_written_after:
                skipped.append(
                    _replace_problem(
                        quick,
                        f"written at {quick.time:.3f}, after the hardware fault at "
                        f"{exclude_written_after:.3f}",
                    )
                )
                continue
            if not quick.verified or not full:
                if quick.verified:
                    return quick, skipped
                skipped.append(quick)
                continue
        info = inspect_one(p, step, full)
        if info.verified:
            return info, skipped
        skipped.append(info)
    return None, skipped


def _replace_problem(info: CheckpointInfo, problem: str) -> CheckpointInfo:
    fields: dict[str, Any] = dict(info.__dict__)
    fields["problem"] = problem
    return CheckpointInfo(**fields)
