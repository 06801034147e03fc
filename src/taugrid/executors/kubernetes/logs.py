"""The log source port for cluster runs: an attempt's pod logs, from the local archive.

:class:`~taugrid.executors.kubernetes.logarchiver.PodLogArchiver` writes the archive while
the pods run (and completes it when they end); this reads it, so ``tau logs`` works the
same whether the pods are running, finished, or long deleted with their Job.

One stream for the whole attempt: every pod's lines merged in timestamp order (lines
within one read; a pod that has not written yet cannot hold the others back), each line
prefixed ``[rank i] `` when the attempt has several pods (``loglines.prefixed``), nothing
when it has one. ``rank=N`` opens one rank only, unprefixed: its pods' lines (a pod
replaced under the same index follows its predecessor). Timestamps are stripped.
"""

from __future__ import annotations

import io
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from taugrid.executors.kubernetes.logarchive import (
    is_complete,
    lines_end,
    log_path,
    pods_dir,
    read_metas,
    tail_start,
)
from taugrid.executors.kubernetes.logarchiver import PodLogArchiver, attempt_selectors
from taugrid.executors.kubernetes.loglines import (
    Line,
    PodMeta,
    assign_ranks,
    parse_line,
    prefix,
    prefixed,
    split_lines,
)
from taugrid.ports.executor import AttemptKey

__all__ = ["ArchiveStream", "KubeLogSource", "PodLogArchiver", "attempt_selectors"]

_BLOCK = 64 * 1024


class KubeLogSource:
    """``LogSource`` over the archive under the runs directory ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def open(
        self, key: AttemptKey, *, tail: int | None = None, rank: int | None = None
    ) -> BinaryIO | None:
        """The attempt's merged log (or one rank's), from the start or its last ``tail``
        lines; None while nothing is archived."""
        stream = ArchiveStream(pods_dir(self.root, key), tail=tail, rank=rank)
        if not stream.has_lines():
            stream.close()
            return None
        return stream

    def complete(self, key: AttemptKey) -> bool:
        """Whether every pod archived for the attempt has ended (its log is all there)."""
        directory = pods_dir(self.root, key)
        metas = read_metas(directory)
        return bool(metas) and all(is_complete(directory, m.pod) for m in metas)

    def ranks(self, key: AttemptKey) -> dict[int, list[str]]:
        """Each rank's pods, in the order their lines are served."""
        metas = read_metas(pods_dir(self.root, key))
        out: dict[int, list[str]] = {}
        ranks = assign_ranks(metas)
        for m in sorted(metas, key=lambda m: (m.created, m.pod)):
            out.setdefault(ranks[m.pod], []).append(m.pod)
        return dict(sorted(out.items()))


class _Cursor:
    """Where a stream is in one pod's archive, and the lines read but not yet served."""

    def __init__(self, path: Path, meta: PodMeta) -> None:
        self.path = path
        self.meta = meta
        self.rank = 0
        self.pos = 0
        self.pending: deque[Line] = deque()
        self._file: BinaryIO | None = None
        self._last_ns = 0

    def size(self) -> int:
        f = self._open()
        return 0 if f is None else f.seek(0, io.SEEK_END)

    def load(self, until: int | None = None) -> None:
        """Read the complete lines after ``pos`` (up to ``until``) into ``pending``."""
        f = self._open()
        if f is None:
            return
        f.seek(self.pos)
        data = f.read(_BLOCK if until is None else until - self.pos)
        while data and until is None and b"\n" not in data:  # one line longer than a block
            more = f.read(_BLOCK)
            if not more:
                break
            data += more
        cut = data.rfind(b"\n") + 1  # a torn last line is still being written
        if cut:
            self.pos += cut
            for raw in split_lines(data[:cut]):
                line = parse_line(raw, self._last_ns)
                self._last_ns = line.ts_ns
                self.pending.append(line)

    def load_tail(self, lines: int) -> None:
        """Read the last ``lines`` complete lines into ``pending``."""
        f = self._open()
        if f is not None:
            end = lines_end(f)
            self.pos = tail_start(f, end, lines)
            self.load(until=end)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open(self) -> BinaryIO | None:
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                return None  # its metadata is written first: the log comes next
        return self._file

    def order(self) -> tuple[int, int, str, str]:
        head = self.pending[0]
        return head.ts_ns, self.rank, self.meta.created, self.meta.pod


class ArchiveStream(io.RawIOBase, BinaryIO):
    """The port's stream: ``read`` gives what was archived since the last read, b"" when
    nothing (never blocks). New pods are picked up at each read."""

    def __init__(self, directory: Path, *, tail: int | None, rank: int | None) -> None:
        super().__init__()
        self.directory = directory
        self.rank = rank
        self._cursors: dict[str, _Cursor] = {}
        self._prefix = False
        self._out = bytearray()
        self._refresh()
        if tail is not None:
            self._start_at_tail(tail)

    def readable(self) -> bool:
        return True

    def has_lines(self) -> bool:
        return bool(self._out) or any(c.size() > 0 for c in self._cursors.values())

    @property
    def complete(self) -> bool:
        """Every pod of the stream has ended and all of it was read."""
        self._refresh()
        if not self._cursors or self._out:
            return False
        return all(
            is_complete(self.directory, c.meta.pod) and not c.pending and c.pos >= c.size()
            for c in self._cursors.values()
        )

    def read(self, size: int | None = -1) -> bytes:
        limit = None if size is None or size < 0 else size
        self._refresh()
        self._merge(limit)
        n = len(self._out) if limit is None else min(limit, len(self._out))
        data = bytes(self._out[:n])
        del self._out[:n]
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        for cursor in self._cursors.values():
            cursor.close()
        super().close()

    def __iter__(self) -> Iterator[bytes]:
        return iter(split_lines(self.read()))

    # -- inside ----------------------------------------------------------------------------
    def _refresh(self) -> None:
        metas = read_metas(self.directory)
        ranks = assign_ranks(metas)
        for meta in metas:
            if meta.pod not in self._cursors and self.rank in (None, ranks[meta.pod]):
                self._cursors[meta.pod] = _Cursor(log_path(self.directory, meta.pod), meta)
        for pod, cursor in self._cursors.items():
            cursor.rank = ranks.get(pod, cursor.rank)
        # Once prefixed, always: a stream never switches back mid-way.
        self._prefix = self._prefix or (self.rank is None and prefixed(metas, ranks))

    def _merge(self, limit: int | None) -> None:
        cursors = list(self._cursors.values())
        dry: set[str] = set()  # read to their end in this call: not read again in it
        while limit is None or len(self._out) < limit:
            for cursor in cursors:
                if not cursor.pending and cursor.meta.pod not in dry:
                    cursor.load()
                    if not cursor.pending:
                        dry.add(cursor.meta.pod)
            ready = [c for c in cursors if c.pending]
            if not ready:
                return
            self._emit(min(ready, key=_Cursor.order))

    def _emit(self, cursor: _Cursor) -> None:
        line = cursor.pending.popleft()
        if self._prefix:
            self._out += prefix(cursor.rank)
        self._out += line.content

    def _start_at_tail(self, lines: int) -> None:
        """Serve the last ``lines`` lines of the merged stream first, then what follows."""
        for cursor in self._cursors.values():
            cursor.load_tail(lines)
        skip = max(0, sum(len(c.pending) for c in self._cursors.values()) - lines)
        while ready := [c for c in self._cursors.values() if c.pending]:
            cursor = min(ready, key=_Cursor.order)
            if skip:
                cursor.pending.popleft()
                skip -= 1
            else:
                self._emit(cursor)
