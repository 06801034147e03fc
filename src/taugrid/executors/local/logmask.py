"""Secret values masked in a workload's output, as CI systems do. Stdlib only (the
supervisor imports it; see ``supervisor``'s docstring for why).

When a run has secrets, the supervisor gives the workload a pipe for stdout and stderr
instead of the log file, and :class:`OutputPump` copies what comes through into
``output.log`` with every occurrence of a secret's value replaced by ``***``. Without
secrets there is no pipe: the workload writes to the file directly, at no cost.

A value may arrive split across two reads (``print(token[:5], end="", flush=True)``
then the rest): :class:`SecretMasker` holds back the end of a read when it is the start
of a secret (at most ``len(longest) - 1`` bytes) until the next read, or the end, shows
whether the secret follows. Anything else is written at once, so `tau logs -f` is not
kept waiting by the masking.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from typing import Protocol

MASK = b"***"
# Shorter values would mask ordinary words and digits all over the log ("1", "true").
MIN_SECRET_CHARS = 4
_READ_BYTES = 64 * 1024
# Reads per call: a workload that writes without pause must not keep the supervisor from
# its other duties (timeouts, cancels); what is left is read on the next wake-up.
_READS_PER_PUMP = 64


def secret_variants(values: Iterable[str]) -> list[bytes]:
    """The byte strings to mask for these values, longest first.

    Each value whole, and each line of a multi-line value (a PEM key is printed line by
    line; a value read from a file often ends with a newline the workload strips).
    """
    found: set[bytes] = set()
    for value in values:
        for text in (value, *value.splitlines()):
            text = text if text is value else text.strip()
            if len(text) >= MIN_SECRET_CHARS:
                found.add(text.encode("utf-8", "surrogateescape"))
    return sorted(found, key=lambda b: (-len(b), b))


class StreamFilter(Protocol):
    """What :class:`OutputPump` passes the output through: :class:`SecretMasker`, or one
    that also prefixes every line with its node (``nodegroup.NodeLines``)."""

    def feed(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


class SecretMasker:
    """Replaces every secret in a byte stream fed in pieces; pure (no I/O)."""

    def __init__(self, secrets: Iterable[bytes]) -> None:
        self.secrets = sorted(set(secrets), key=lambda b: (-len(b), b))
        self._tail = b""

    def feed(self, data: bytes) -> bytes:
        """What of ``tail + data`` is safe to write now, masked; keeps the rest."""
        buf = self._tail + data
        limit = len(buf) - self._partial_at_end(buf)  # a secret starting before: in buf
        out: list[bytes] = []
        pos = 0
        while True:
            start, secret = self._find(buf, pos)
            if secret is None or start >= limit:
                break
            out.append(buf[pos:start])
            out.append(MASK)
            pos = start + len(secret)
        cut = max(pos, limit)
        out.append(buf[pos:cut])
        self._tail = buf[cut:]
        return b"".join(out)

    def flush(self) -> bytes:
        """The held-back tail, masked: the stream has ended."""
        buf, self._tail = self._tail, b""
        out: list[bytes] = []
        pos = 0
        while True:
            start, secret = self._find(buf, pos)
            if secret is None:
                out.append(buf[pos:])
                return b"".join(out)
            out.append(buf[pos:start])
            out.append(MASK)
            pos = start + len(secret)

    def _partial_at_end(self, buf: bytes) -> int:
        """Length of the longest end of ``buf`` that is the start of a secret."""
        best = 0
        for secret in self.secrets:
            for k in range(min(len(secret) - 1, len(buf)), best, -1):
                if buf.endswith(secret[:k]):
                    best = k
                    break
        return best

    def _find(self, buf: bytes, pos: int) -> tuple[int, bytes | None]:
        """The leftmost secret at or after ``pos`` (the longest when several start there)."""
        best, found = len(buf), None
        for secret in self.secrets:
            at = buf.find(secret, pos, best + len(secret) - 1)
            if at != -1 and (at < best or found is None):
                best, found = at, secret
        return best, found


class OutputPump:
    """Copies the workload's output pipe into the log, masked. Never blocks: the pipe's
    read end is non-blocking, so the supervisor's loop stays responsive, and the workload
    never waits on a full pipe for long because the supervisor always reads."""

    def __init__(self, read_fd: int, log_fd: int, masker: StreamFilter) -> None:
        os.set_blocking(read_fd, False)
        self.read_fd = read_fd
        self.log_fd = log_fd
        self.masker = masker
        self.eof = False
        self.lost_bytes = 0  # not written: the disk was full

    def fileno(self) -> int:
        return self.read_fd

    def on_ready(self) -> None:
        self.pump()

    def pump(self) -> None:
        """Read what is there now (a bounded amount) and write it out masked."""
        for _ in range(_READS_PER_PUMP):
            try:
                data = os.read(self.read_fd, _READ_BYTES)
            except BlockingIOError:
                return
            except OSError:  # pragma: no cover - a pipe we own does not fail otherwise
                data = b""
            if not data:
                self.eof = True
                return
            self._write(self.masker.feed(data))

    def finish(self) -> None:
        """Read what is left (every writer is gone by now), flush the tail, close both."""
        while not self.eof:
            try:
                data = os.read(self.read_fd, _READ_BYTES)
            except BlockingIOError:
                break  # a writer outside the workload's tree keeps it open: stop here
            if not data:
                break
            self._write(self.masker.feed(data))
        self.eof = True
        self._write(self.masker.flush())
        os.close(self.read_fd)
        os.close(self.log_fd)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.log_fd, view)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
                    raise
                self.lost_bytes += len(view)
                return
            view = view[n:]


def line_masker(values: Iterable[str]) -> Callable[[bytes], bytes]:
    """A function masking these values in one whole line (a cluster pod's archived log)."""
    variants = secret_variants(values)

    def mask(line: bytes) -> bytes:
        masker = SecretMasker(variants)
        return masker.feed(line) + masker.flush()

    return mask
