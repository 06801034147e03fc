"""The log source port: an attempt's output, read while it runs and after it ended.

Contract: ``open`` returns the output from ``offset`` (``tail`` lines from the end when
given) as a stream, or None while the attempt has written nothing yet. Reading the stream
again gives what was appended since, without blocking (b"" when nothing new). ``rank``:
one rank's output only (a cluster attempt's pod), unprefixed; None: the whole attempt
(several ranks' lines prefixed ``[rank i]``). A stream that may still be catching up
with an attempt that has ended says so with ``complete`` False (absent: complete).
"""

from __future__ import annotations

from typing import BinaryIO, Protocol

from taugrid.ports.executor import AttemptKey


class LogSource(Protocol):
    def open(
        self, key: AttemptKey, *, tail: int | None = None, rank: int | None = None
    ) -> BinaryIO | None: ...
