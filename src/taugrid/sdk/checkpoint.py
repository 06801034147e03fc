"""Crash-safe checkpoints for any framework (DESIGN.md 3.4). Stdlib only.

Write::

    with taugrid.checkpoint.saving(step) as d:     # d: a fresh temporary directory
        torch.save(model.state_dict(), d / "model.pt")
    # here the checkpoint is durable as $TAU_CHECKPOINT_DIR/step-0000001234/

Resume::

    ck = taugrid.checkpoint.latest()               # None on a fresh start
    start = ck.step + 1 if ck else 0

``saving(step)`` yields ``$TAU_CHECKPOINT_DIR/.tmp-step-<step>-<pid>-<rand>``; on a clean
exit it hashes (sha256) and fsyncs every file, writes ``tau-checkpoint.json``, fsyncs the
directories and renames the tree to ``step-%010d`` in one atomic rename. A reader (this
module, the server) sees only ``step-*`` directories whose manifest verifies, so a
``kill -9`` or power loss at any moment leaves the previous set of checkpoints or the new
complete one, never a partial one. After each commit the ``$TAU_CHECKPOINT_KEEP`` newest
(default 3) are kept and temporary directories of dead writers are removed.

The server imports :func:`verify`, :func:`list_checkpoints` and :func:`newest_verified`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from taugrid.sdk import _writer
from taugrid.sdk._async import AsyncSave, buffers, flat, save_async
from taugrid.sdk._store import (
    ENV_RESUME,
    ENV_RESUME_BEFORE,
    MANIFEST,
    Checkpoint,
    CheckpointDirNotSet,
    CheckpointError,
    CheckpointInfo,
    CheckpointWriteError,
    FileEntry,
    check_step,
    env_attempt,
    env_run_id,
    inspect,
    list_checkpoints,
    newest_verified,
    read_manifest,
    resolve_root,
    step_dirs,
    verify,
)

__all__ = [
    "MANIFEST",
    "AsyncSave",
    "Checkpoint",
    "CheckpointDirNotSet",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointWriteError",
    "FileEntry",
    "latest",
    "list_checkpoints",
    "newest_verified",
    "save_async",
    "saving",
    "verify",
    "write_files",
]


@contextmanager
def saving(step: int, *, root: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """Write checkpoint ``step``: yields a fresh empty directory to write files into.

    ``root`` defaults to ``$TAU_CHECKPOINT_DIR`` (:class:`CheckpointDirNotSet`, a
    ``RuntimeError``, if neither is set). On a clean exit of the ``with`` block the
    checkpoint is committed (see the module docstring) and becomes ``root/step-%010d``,
    replacing a checkpoint of the same step if there is one; then old ones are pruned.

    If the block raises, or committing fails, the temporary directory is removed, older
    checkpoints are untouched and the exception propagates; "disk full" (in the block or
    while committing) and any other I/O error while committing raise
    :class:`CheckpointWriteError` (an ``OSError`` naming the step and the free space).
    Commits are serialized within the process, and wait for an async save in flight.
    """
    step = check_step(step)
    root_p = resolve_root(root)
    tmp = _writer.new_tmp_dir(root_p, step)
    with _writer.discarded_on_error(tmp, step, root_p, user_code=True):
        yield tmp
    with _writer.slot:
        with _writer.discarded_on_error(tmp, step, root_p, user_code=False):
            _writer.commit(tmp, step, root_p)
        _writer.housekeeping(root_p, step)


def write_files(directory: str | os.PathLike[str], files: Mapping[str, Any]) -> list[FileEntry]:
    """Write ``{relative/posix/path: buffer}`` into ``directory`` (the one ``saving()``
    yielded), the fast way: big buffers are written with O_DIRECT (no page-cache copy;
    plain writes where the filesystem refuses it, or with ``TAU_CHECKPOINT_DIRECT=0``)
    while other threads hash them, and each file is fsynced as soon as it is written, so
    the commit at the end of the ``with`` block reads none of them again. Buffers as for
    :func:`save_async` (bytes, bytearray, memoryview, NumPy arrays; saved as
    ``memoryview(obj).tobytes()``). Files must not exist yet. Returns their entries."""
    items = buffers(files)
    try:
        return _writer.write_files(Path(directory), [(rel, flat(d)) for rel, d in items])
    finally:
        for _, data in items:
            if isinstance(data, memoryview):
                data.release()


def _load(path: Path, *, full: bool) -> Checkpoint | None:
    if verify(path, full=full) is not None:
        return None
    manifest, _ = read_manifest(path)
    if manifest is None:  # replaced between the two reads
        return None
    return Checkpoint(
        path=path,
        step=manifest.step,
        time=manifest.time,
        attempt=manifest.attempt,
        size=manifest.total_size,
        files=manifest.files,
    )


def _resume_before() -> float | None:
    raw = os.environ.get(ENV_RESUME_BEFORE)
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


def latest(*, root: str | os.PathLike[str] | None = None, full: bool = True) -> Checkpoint | None:
    """The checkpoint to resume from, or None on a fresh start.

    In order: the newest checkpoint that this attempt itself wrote (same ``$TAU_RUN_ID``
    and ``$TAU_ATTEMPT`` in its manifest); else ``$TAU_RESUME_FROM`` when it verifies (the
    server chose it, skipping corrupt ones and those written after a hardware fault; set but
    empty means "start fresh"); else the newest checkpoint under ``root`` (default
    ``$TAU_CHECKPOINT_DIR``) whose manifest verifies, leaving out those written after
    ``$TAU_RESUME_BEFORE`` (a hardware fault's time, set where the server could not
    choose: a cluster volume it does not see). ``full`` (default) checks every
    file's sha256; ``full=False`` only presence and sizes.
    """
    resume = os.environ.get(ENV_RESUME)
    try:
        root_p: Path | None = resolve_root(root)
    except CheckpointDirNotSet:
        if resume is None:
            raise
        root_p = None
    attempt, run_id = env_attempt(), env_run_id()
    if root_p is not None and attempt is not None and run_id is not None:
        for step, p in step_dirs(root_p):
            mine = inspect(p, step, full=False)
            if mine.verified and mine.attempt == attempt and mine.run_id == run_id:
                found = _load(p, full=full)
                if found is not None:
                    return found
    if resume is not None:
        if not resume:
            return None
        found = _load(Path(resume), full=full)
        if found is not None:
            return found
        problem = verify(resume, full=False) or "sha256 mismatch"
        _writer.warn_once(
            "resume", f"{ENV_RESUME}={resume} does not verify ({problem}); looking for another"
        )
    if root_p is None:
        return None
    info, _skipped = newest_verified(root_p, exclude_written_after=_resume_before(), full=full)
    return info.to_checkpoint() if info is not None else None
