"""The log source port for the local executor: an attempt's ``output.log``."""

from __future__ import annotations

import os
from typing import IO, BinaryIO

from taugrid.errors import UsageError
from taugrid.executors.local.layout import RunLayout
from taugrid.ports.executor import AttemptKey


class LocalLogSource:
    def __init__(self, layout: RunLayout) -> None:
        self.layout = layout

    def open(
        self, key: AttemptKey, *, tail: int | None = None, rank: int | None = None
    ) -> BinaryIO | None:
        if rank is not None:
            raise UsageError(
                "--rank is for cluster runs' pods; a local run's nodes are prefixed [node i]"
            )
        try:
            f = self.layout.log_path(key.run_id, key.attempt).open("rb")
        except FileNotFoundError:
            return None
        if tail is not None:
            f.seek(_tail_offset(f, tail))
        return f


def _tail_offset(f: IO[bytes], lines: int) -> int:
    """Offset where the last ``lines`` lines start, reading backwards in blocks."""
    end = f.seek(0, os.SEEK_END)
    if lines <= 0:
        return end
    pos, found, block = end, 0, 8192
    while pos > 0:
        step = min(block, pos)
        pos -= step
        f.seek(pos)
        data = f.read(step)
        if pos + step == end and data.endswith(b"\n"):
            data = data[:-1]  # the final newline ends the last line; it doesn't start one
        for i in range(len(data) - 1, -1, -1):
            if data[i] == 0x0A:
                found += 1
                if found == lines:
                    return pos + i + 1
    return 0
