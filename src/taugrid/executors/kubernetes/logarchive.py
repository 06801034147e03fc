"""The local archive of an attempt's pod logs: files, so logs outlive the pods.

Layout, beside the local executor's (``<runs_dir>/<run>/attempts/<k>/``)::

    pods/<pod>.json   what the pod is (``loglines.PodMeta``); readers list these
    pods/<pod>.log    its container's lines as the kubelet stamped them: ``<ts> <content>``
    pods/<pod>.done   the archive is complete (the pod ended, or is gone): JSON, the end

One file per pod, not per rank: a pod replaced under the same index, or a Ray worker
recreated by KubeRay, has its own archive and its own resume point; ranks are assigned
when reading (``loglines.assign_ranks``). Lines are appended whole, one ``write`` per
batch, so a reader sees at most a torn last line, which it leaves for the next read; a
torn line left by a crash is cut off when the archive is opened again (the resumed stream
sends it again). Durability: fsync at the pod's end (and when the archiver stops), then
the marker, written aside and renamed. A writer holds an exclusive flock on the log: two
followers of one pod (two archivers by mistake) would repeat lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import IO

from taugrid.executors.kubernetes.loglines import (
    Line,
    PodMeta,
    ResumePoint,
    parse_line,
    split_lines,
)
from taugrid.fsdurable import fsync_dir
from taugrid.ports.executor import AttemptKey

_BLOCK = 64 * 1024


class ArchiveBusy(OSError):
    """Another writer holds the pod's archive."""


def pods_dir(root: Path, key: AttemptKey) -> Path:
    """Where an attempt's pod archives are, under the runs directory ``root``."""
    return root / key.run_id / "attempts" / str(key.attempt) / "pods"


def read_metas(directory: Path) -> list[PodMeta]:
    """The pods archived in ``directory``, by name; unreadable entries are skipped."""
    metas = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for path in sorted(directory.glob("*.json")):
            try:
                metas.append(PodMeta.from_json(json.loads(path.read_bytes())))
            except (OSError, ValueError, TypeError):
                continue  # being written (it is renamed into place) or not ours
    return metas


def log_path(directory: Path, pod: str) -> Path:
    return directory / f"{pod}.log"


def is_complete(directory: Path, pod: str) -> bool:
    return (directory / f"{pod}.done").exists()


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_dir(path.parent)


class PodArchive:
    """The writer of one pod's archive. Used by one thread (its follower)."""

    def __init__(self, directory: Path, meta: PodMeta) -> None:
        self.directory = directory
        self.meta = meta
        self.path = log_path(directory, meta.pod)
        self._fd: int | None = None

    def open(self) -> ResumePoint:
        """Open for appending (creating it), cut a torn last line, and say where it ends."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ArchiveBusy(f"{self.path}: another writer has it") from None
            self._fd = fd
        meta_path = self.directory / f"{self.meta.pod}.json"  # under the lock: one writer
        if not meta_path.exists():
            _write_atomically(meta_path, json.dumps(self.meta.to_json()).encode())
        with open(self._fd, "rb", closefd=False) as f:
            end = lines_end(f)
            if end != os.fstat(self._fd).st_size:
                os.ftruncate(self._fd, end)
            return ResumePoint.of(_lines_at_last_timestamp(f, end))

    def append(self, lines: list[Line]) -> None:
        if lines:
            assert self._fd is not None, "open() first"
            data = memoryview(b"".join(line.archived() for line in lines))
            while data:
                data = data[os.write(self._fd, data) :]

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def finish(self, end: str) -> None:
        """The archive is complete: what it holds is on disk, then the marker."""
        self.sync()
        _write_atomically(
            self.directory / f"{self.meta.pod}.done", json.dumps({"end": end}).encode()
        )

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lines_end(f: IO[bytes]) -> int:
    """The offset just past the file's last newline (0 if it has none)."""
    pos = f.seek(0, os.SEEK_END)
    while pos > 0:
        step = min(_BLOCK, pos)
        f.seek(pos - step)
        cut = f.read(step).rfind(b"\n")
        if cut >= 0:
            return pos - step + cut + 1
        pos -= step
    return 0


def _lines_at_last_timestamp(f: IO[bytes], end: int) -> list[Line]:
    """The lines before ``end`` from the first one sharing the last line's timestamp (a
    resumed stream may repeat those), read backwards in growing blocks."""
    size = _BLOCK
    while True:
        start = max(0, end - size)
        f.seek(start)
        data = f.read(end - start)
        if start > 0:
            data = data[data.find(b"\n") + 1 :]  # the first line may be cut by the block
        lines = [parse_line(raw) for raw in split_lines(data)]
        first = len(lines)
        while first > 0 and lines[first - 1].ts_ns == lines[-1].ts_ns:
            first -= 1
        if first > 0 or start == 0:
            return lines[first:]
        size *= 4


def tail_start(f: IO[bytes], end: int, lines: int) -> int:
    """The offset where the last ``lines`` lines before ``end`` start."""
    if lines <= 0:
        return end
    pos, found = end, 0
    while pos > 0:
        step = min(_BLOCK, pos)
        pos -= step
        f.seek(pos)
        data = f.read(step)
        if pos + step == end:
            data = data[:-1]  # the last line's newline ends it; it starts none
        at = len(data)
        while (at := data.rfind(b"\n", 0, at)) >= 0:
            found += 1
            if found == lines:
                return pos + at + 1
    return 0
