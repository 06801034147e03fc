"""The artifact store port: what a run leaves behind (checkpoints, outputs, metrics), the
code snapshots it starts from, and their retention.

Contract: reads never follow what the workload could have swapped in (a symlink, a fifo)
and never block on the workload; a missing thing is ``NotFound`` (``taugrid.errors``) or
an empty answer as documented per method, never an OS error. Writes (``release_workdir``,
``remove_run``) are idempotent. Local disk now (``executors.local.artifacts``); object
storage and PVCs next, behind the same methods.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from taugrid.ports.executor import AttemptKey
from taugrid.sdk.checkpoint import CheckpointInfo

__all__ = ["ArtifactStore", "CheckpointInfo", "OpenedFile", "SnapshotUpload", "WorkloadPaths"]


@dataclass(frozen=True)
class WorkloadPaths:
    """Where the workload writes, as the workload sees it (TAU_CHECKPOINT_DIR, ...)."""

    checkpoint_dir: str
    output_dir: str
    metrics_file: str


@dataclass
class OpenedFile:
    """A file opened for reading and its size when opened (a file still growing is
    served up to that size). The reader closes ``file``."""

    file: BinaryIO
    size: int

    def chunks(self, chunk: int = 1 << 20) -> Iterator[bytes]:
        try:
            left = self.size
            while left > 0 and (data := self.file.read(min(chunk, left))):
                left -= len(data)
                yield data
        finally:
            self.file.close()


class SnapshotUpload(Protocol):
    """One code snapshot on its way in: ``write`` the body piece by piece (refused past
    the size limit), then ``finish`` (refused unless the bytes are the digest and a safe
    archive; durable once it returns); ``discard`` removes what is left (always call it)."""

    digest: str

    def write(self, data: bytes) -> None: ...

    def finish(self) -> None: ...

    def discard(self) -> None: ...


class ArtifactStore(Protocol):
    def workload_paths(self, key: AttemptKey) -> WorkloadPaths: ...

    def checkpoints(self, run_id: str, *, full: bool = False) -> list[CheckpointInfo]:
        """Newest step first; ``full`` hashes every file (seconds per GiB: not on the
        engine's thread), otherwise manifest, presence and sizes are checked."""
        ...

    def resume_point(
        self, run_id: str, *, fault_at: float | None = None
    ) -> tuple[CheckpointInfo | None, list[CheckpointInfo]]:
        """The newest checkpoint that verifies in full and was written before
        ``fault_at``, and the newer ones skipped (each with its ``problem``)."""
        ...

    def open_checkpoint_file(self, run_id: str, step: int, rel: str) -> OpenedFile: ...

    def outputs(self, run_id: str) -> list[tuple[str, int]]:
        """(relative path, size) of each output file, sorted; empty when there are none."""
        ...

    def open_output(self, run_id: str, rel: str) -> OpenedFile: ...

    def read_metrics(self, key: AttemptKey, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes of the attempt's metrics lines from ``offset``; b"" when
        there are none (yet)."""
        ...

    # -- code snapshots, content-addressed by the sha256 of the archive ------------------
    def snapshot_exists(self, digest: str) -> bool:
        """Whether the snapshot is stored; ``UsageError`` for a malformed digest."""
        ...

    def begin_snapshot(self, digest: str, declared_bytes: int | None) -> SnapshotUpload:
        """An upload of ``digest``; a declared length over the limit is refused before a
        byte of the body is read (``SnapshotTooLarge``)."""
        ...

    def open_snapshot(self, digest: str) -> OpenedFile:
        """The archive's bytes (``NotFound`` when it is not stored)."""
        ...

    def release_workdir(self, run_id: str) -> None:
        """The run finished: its unpacked code can go (the snapshot stays)."""
        ...

    def remove_run(self, run_id: str) -> bool:
        """Retention: remove the run's logs, outputs and checkpoints; False when there
        was nothing left to remove."""
        ...
