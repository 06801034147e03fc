"""Progress of the client-side work of a submit: archiving the workdir, uploading it.

On a terminal (stderr), one line rewritten in place with ``\\r`` while the work goes on,
then one summary line (``snapshot 91.2 MiB, 1,204 files, archived to 63.0 MiB in 2.0 s,
uploaded in 3.1 s``). Nothing when stderr is not a terminal or with ``-o json``, and
nothing for work that is over before :data:`DELAY_S` (a small workdir submits as quietly
as before). Plain text, not rich: one line needs no layout engine, and rich costs more to
import than the archive of a small workdir takes. The words are pure functions, the
drawing one class.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

DELAY_S = 0.3  # nothing is drawn for work shorter than this
INTERVAL_S = 0.1  # at most ten redraws a second


def human_bytes(n: float) -> str:
    """``512 B``, ``3.4 KiB``, ``91.2 MiB``, ``1.5 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _pair(done: float, total: float) -> str:
    """``40.1/91.2 MiB``: both in the unit of the total."""
    whole = human_bytes(total)
    unit = whole.split(" ", 1)[1]
    scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
    part = f"{int(done)}" if unit == "B" else f"{done / scale:.1f}"
    return f"{part}/{whole}"


def archiving_text(files: int, files_total: int, done: int, total: int) -> str:
    """``archiving: 312/1,204 files, 40.1/91.2 MiB``."""
    files = min(files, files_total)
    return f"archiving: {files:,}/{files_total:,} files, {_pair(min(done, total), total)}"


def uploading_text(sent: int, total: int, elapsed: float) -> str:
    """``uploading: 40.1/63.0 MiB (64%), 21.3 MiB/s``; once all is sent, the server is
    still hashing and checking the archive before it answers."""
    if total and sent >= total:
        return f"uploading: {_pair(total, total)} sent, the server is checking it"
    pct = f" ({100 * sent // total}%)" if total else ""
    rate = f", {human_bytes(sent / elapsed)}/s" if elapsed > 0 and sent else ""
    return f"uploading: {_pair(sent, total)}{pct}{rate}"


def summary_text(
    content_bytes: int,
    files: int,
    archive_bytes: int,
    archive_s: float,
    upload_s: float | None,
) -> str:
    """``snapshot 91.2 MiB, 1,204 files, archived to 63.0 MiB in 2.0 s, uploaded in 3.1 s``;
    ``upload_s`` None: the server had it already."""
    head = (
        f"snapshot {human_bytes(content_bytes)}, {files:,} files, "
        f"archived to {human_bytes(archive_bytes)} in {archive_s:.1f} s"
    )
    if upload_s is None:
        return f"{head}, already on the server"
    return f"{head}, uploaded in {upload_s:.1f} s"


class SubmitProgress:
    """Draws the archive and upload progress on a terminal; does nothing when off."""

    def __init__(
        self,
        enabled: bool,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self._stream = stream or sys.stderr
        self._clock = clock
        self._began = clock()
        self._phase_began = self._began
        self._last_draw = 0.0
        self._width = 0  # of the line on screen, to blank what a shorter one leaves
        self.drawn = False
        self.archive_s = 0.0
        self.upload_s: float | None = None

    @classmethod
    def for_output(cls, output: str) -> SubmitProgress:
        """On when stderr is a terminal and the output is not ``-o json``."""
        return cls(output != "json" and sys.stderr.isatty())

    # -- callbacks (archive: taugrid.workdir.snapshot; upload: the client) ------
    def archiving(self, files: int, done: int, files_total: int, total: int) -> None:
        if self.enabled:
            self._draw(archiving_text(files, files_total, done, total), files >= files_total)

    def archived(self) -> None:
        now = self._clock()
        self.archive_s = now - self._phase_began
        self._phase_began = now

    def uploader(self, total: int) -> Callable[[int], None]:
        """The callback for one upload of ``total`` bytes (called with bytes sent)."""
        began = self._clock()

        def sent(n: int) -> None:
            if self.enabled:
                self._draw(uploading_text(n, total, self._clock() - began), n >= total)

        return sent

    def uploaded(self) -> None:
        self.upload_s = self._clock() - self._phase_began

    def finish(self, content_bytes: int, files: int, archive_bytes: int) -> None:
        """The summary line, only where progress was drawn (the work took a while)."""
        if not (self.enabled and self.drawn):
            return
        self._clear()
        text = summary_text(content_bytes, files, archive_bytes, self.archive_s, self.upload_s)
        self._stream.write(text + "\n")
        self._stream.flush()

    def abandon(self) -> None:
        """Leave the line clean when the work fails (its error prints next)."""
        if self.enabled and self.drawn:
            self._clear()

    # -- drawing ------------------------------------------------------------------------
    def _draw(self, text: str, final: bool) -> None:
        now = self._clock()
        if now - self._began < DELAY_S:
            return
        if not final and now - self._last_draw < INTERVAL_S:
            return
        self._last_draw = now
        columns = shutil.get_terminal_size((80, 24)).columns
        text = text[: max(columns - 1, 10)]  # a wrapped line could not be redrawn in place
        pad = " " * max(self._width - len(text), 0)
        self._stream.write("\r" + text + pad)
        self._stream.flush()
        self._width = len(text)
        self.drawn = True

    def _clear(self) -> None:
        self._stream.write("\r" + " " * self._width + "\r")
        self._stream.flush()
        self._width = 0
