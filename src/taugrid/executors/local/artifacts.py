"""The artifact store port on this machine's disk: what runs leave under
``$TAU_HOME/runs/<run_id>/`` (``RunLayout``).

The workload writes these files (through the SDK, or as it likes); nothing in them is
trusted. Checkpoints are verified with the SDK's own functions, so "verified" means the
same to the workload that resumes and to the person looking at ``tau status``. Every
file served is opened beneath its root without following a link (``safe_open``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from taugrid.errors import NotFound
from taugrid.executors.local.layout import RunLayout
from taugrid.executors.local.safe_open import open_beneath
from taugrid.executors.local.snapshot_store import SnapshotFiles, SnapshotUpload
from taugrid.ports.artifacts import OpenedFile, WorkloadPaths
from taugrid.ports.executor import AttemptKey
from taugrid.sdk.checkpoint import CheckpointInfo, list_checkpoints, newest_verified

# A finished run's workdir is renamed to this (plus a random suffix) inside its run
# directory, then removed in the background.
REMOVING_PREFIX = ".workdir.removing."


class LocalArtifactStore:
    def __init__(self, layout: RunLayout, snapshots_dir: Path | None = None) -> None:
        self.layout = layout
        # ``$TAU_HOME/snapshots`` beside the runs (the local executor unpacks from there).
        self.snapshots = SnapshotFiles(snapshots_dir or layout.runs_root.parent / "snapshots")
        self._removals: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._remover: threading.Thread | None = None
        self._remover_lock = threading.Lock()
        self._looked_for_leftovers = False

    def workload_paths(self, key: AttemptKey) -> WorkloadPaths:
        return WorkloadPaths(
            checkpoint_dir=str(self.layout.checkpoint_dir(key.run_id)),
            output_dir=str(self.layout.output_dir(key.run_id)),
            metrics_file=str(self.layout.metrics_file(key.run_id, key.attempt)),
        )

    # -- checkpoints ----------------------------------------------------------------------
    def checkpoints(self, run_id: str, *, full: bool = False) -> list[CheckpointInfo]:
        return list_checkpoints(self.layout.checkpoint_dir(run_id), full=full)

    def resume_point(
        self, run_id: str, *, fault_at: float | None = None
    ) -> tuple[CheckpointInfo | None, list[CheckpointInfo]]:
        return newest_verified(
            self.layout.checkpoint_dir(run_id), exclude_written_after=fault_at, full=True
        )

    def open_checkpoint_file(self, run_id: str, step: int, rel: str) -> OpenedFile:
        found = [c for c in self.checkpoints(run_id) if c.step == step]
        if not found:
            raise NotFound(f"run {run_id} has no checkpoint at step {step}")
        ckpt = found[0]
        what = f"checkpoint step {step} of run {run_id}"
        if rel not in {f.path for f in ckpt.files} and rel != "tau-checkpoint.json":
            raise NotFound(f"{what} has no file '{rel}'")
        root = self.layout.checkpoint_dir(run_id)
        return _opened(open_beneath(root, f"{ckpt.path.name}/{rel}", what))

    # -- outputs --------------------------------------------------------------------------
    def outputs(self, run_id: str) -> list[tuple[str, int]]:
        root = self.layout.output_dir(run_id)
        if not root.exists():
            return []
        return [
            (p.relative_to(root).as_posix(), p.stat().st_size)
            for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()
        ]

    def open_output(self, run_id: str, rel: str) -> OpenedFile:
        return _opened(open_beneath(self.layout.output_dir(run_id), rel, f"run {run_id}"))

    # -- metrics --------------------------------------------------------------------------
    def read_metrics(self, key: AttemptKey, offset: int, limit: int) -> bytes:
        with _open_regular(self.layout.metrics_file(key.run_id, key.attempt)) as f:
            if f is None:
                return b""
            if os.fstat(f.fileno()).st_size <= offset:
                return b""
            f.seek(offset)
            return f.read(limit)

    # -- code snapshots -------------------------------------------------------------------
    def snapshot_exists(self, digest: str) -> bool:
        return self.snapshots.exists(digest)

    def begin_snapshot(self, digest: str, declared_bytes: int | None) -> SnapshotUpload:
        return self.snapshots.begin(digest, declared_bytes)

    def open_snapshot(self, digest: str) -> OpenedFile:
        return self.snapshots.open(digest)

    # -- removal --------------------------------------------------------------------------
    def release_workdir(self, run_id: str) -> None:
        """The workdir is a copy of the code snapshot, which stays: `tau resume` and
        `tau rerun` unpack it again. It is gone from its place at once (one rename, so a
        resume unpacks a fresh one and never races the removal); deleting its files, as
        many as the user's code has, happens on a thread of its own."""
        workdir = self.layout.workdir(run_id)
        aside = workdir.with_name(REMOVING_PREFIX + os.urandom(4).hex())
        try:
            os.rename(workdir, aside)
        except FileNotFoundError:
            return
        except OSError:
            shutil.rmtree(workdir, ignore_errors=True)
            return
        self._remove_later(aside)

    def remove_run(self, run_id: str) -> bool:
        run_dir = self.layout.run_dir(run_id)
        if not run_dir.exists():
            return False
        shutil.rmtree(run_dir, ignore_errors=True)
        return True

    def look_for_leftovers(self) -> None:
        """Remove, in the background, workdirs a previous server set aside and did not
        finish removing (once per server)."""
        if not self._looked_for_leftovers:
            self._looked_for_leftovers = True
            self._remove_later(None)

    def left_behind(self) -> list[Path]:
        return sorted(self.layout.runs_root.glob(f"*/{REMOVING_PREFIX}*"))

    def _remove_later(self, path: Path | None) -> None:
        """Queue ``path`` for removal; None: look for what a previous server left."""
        self._removals.put(path)
        with self._remover_lock:
            if self._remover is None:
                self._remover = threading.Thread(
                    target=self._remove_forever, name="tau-remover", daemon=True
                )
                self._remover.start()

    def _remove_forever(self) -> None:
        while True:
            path = self._removals.get()
            for p in self.left_behind() if path is None else [path]:
                shutil.rmtree(p, ignore_errors=True)


def _opened(fd: int) -> OpenedFile:
    size = os.fstat(fd).st_size
    return OpenedFile(os.fdopen(fd, "rb"), size)


@contextlib.contextmanager
def _open_regular(path: Path) -> Iterator[IO[bytes] | None]:
    """``path`` opened for reading if it is a regular file (not a symlink, a directory or
    a fifo the workload put there, which would make the server read elsewhere or block);
    None when it is missing or anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        yield None
        return
    with os.fdopen(fd, "rb") as f:
        yield f
