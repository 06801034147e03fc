"""One pod's container log into its archive (``logarchive``), on a thread of its own.

It streams the log (``follow=True, timestamps=True``) from the archive's resume point.
When the stream ends (the container exited, the connection was cut, the kubelet or the
API server restarted) it asks whether the pod ended: if it did (Succeeded, Failed, or
gone) a last read without ``follow`` fetches what a cut stream may have missed, and the
archive is completed; otherwise it follows again from the new resume point, after a
capped backoff. A restarted server does the same from the files, so no line is lost or
repeated (``loglines.ResumeFilter`` says why ``sinceTime`` alone would repeat some).

A followed log has no read timeout (a workload may be quiet for hours), so a connection
that died without a word would hold the stream forever. :meth:`PodFollower.check`, called
by the archiver's watchdog, closes a stream idle for ``idle_s`` (resuming is lossless and
cheap) and one still open ``end_grace_s`` after the pod was seen ended or deleted.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from taugrid.executors.kubernetes.client import KubeClient, KubeError, NotFound, ObjectRef
from taugrid.executors.kubernetes.logarchive import ArchiveBusy, PodArchive
from taugrid.executors.kubernetes.loglines import (
    Line,
    PodMeta,
    ResumeFilter,
    ResumePoint,
    parse_line,
    pod_ended,
)

log = logging.getLogger(__name__)

LineMask = Callable[[bytes], bytes]


@dataclass(frozen=True)
class Timing:
    """Retries back off from ``initial_s`` to ``cap_s``; see the module docstring for the
    watchdog's ``idle_s`` and ``end_grace_s``."""

    initial_s: float = 1.0
    cap_s: float = 30.0
    idle_s: float = 300.0
    end_grace_s: float = 10.0

    def delays(self) -> Iterator[float]:
        delay = self.initial_s
        while True:
            yield delay
            delay = min(delay * 2, self.cap_s)


class PodFollower:
    """``run`` on its own thread; ``update``, ``check`` and ``close`` from others."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        directory: Path,
        meta: PodMeta,
        *,
        mask: LineMask | None,
        timing: Timing,
        deleted: bool = False,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.meta = meta
        self.mask = mask
        self.timing = timing
        self.archive = PodArchive(directory, meta)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._deleted = deleted
        self._ended_at: float | None = time.monotonic() if deleted else None
        self._stream: Iterator[bytes] | None = None
        self._active_at = time.monotonic()  # the stream's last line (or its start)
        self._fragment: bytes | None = None  # an unterminated last piece of a stream
        self._last_error = ""

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.meta.pod}"

    def update(self, pod: Mapping[str, Any] | None, deleted: bool) -> None:
        """What the informer saw: an ended or deleted pod's stream must end soon."""
        with self._lock:
            self._deleted = self._deleted or deleted
            if self._ended_at is None and (deleted or (pod is not None and pod_ended(pod))):
                self._ended_at = time.monotonic()

    def check(self, now: float) -> None:
        """The watchdog: close a stream idle too long, or open past the pod's end."""
        with self._lock:
            stream, ended_at = self._stream, self._ended_at
            idle = now - self._active_at
        late = ended_at is not None and now - ended_at > self.timing.end_grace_s
        if stream is not None and (late or idle > self.timing.idle_s):
            _close(stream)  # the loop in run() resumes, or completes an ended pod

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            stream = self._stream
        _close(stream)

    def run(self) -> None:
        try:
            point = self.archive.open()
        except ArchiveBusy:
            log.warning("pod logs %s: another follower has its archive", self.where)
            return
        try:
            delays = self.timing.delays()
            while not self._closed.is_set():
                with self._lock:
                    deleted = self._deleted
                healthy = False
                if not deleted:
                    try:
                        healthy = self._follow(point)
                    except KubeError as exc:
                        if not isinstance(exc, NotFound):
                            self._note(exc)
                if self._closed.is_set():
                    break
                end = self._end()
                if end is not None and self._final(point, end):
                    return
                if healthy:  # a stream that worked ended: follow again at once
                    delays = self.timing.delays()
                else:  # one that failed or ended at once: back off, not to hammer the API
                    self._closed.wait(next(delays))
        finally:
            with contextlib.suppress(OSError):
                self.archive.sync()
            self.archive.close()

    # -- inside ----------------------------------------------------------------------------
    def _follow(self, point: ResumePoint) -> bool:
        """Follow the log to the end of one stream; whether it was a healthy one (it
        archived lines, or lasted: a quiet workload's stream closed by the watchdog)."""
        started = time.monotonic()
        stream = self._logs(point, follow=True)
        with self._lock:
            self._stream = stream
            self._active_at = time.monotonic()
        if self._closed.is_set():
            _close(stream)
        moved = False
        keep = ResumeFilter(point)
        self._fragment = None
        try:
            for raw in stream:
                self._active_at = time.monotonic()
                if not raw.endswith(b"\n"):
                    self._fragment = raw  # the last read sends it whole if it is the end
                    continue
                line = self._masked(parse_line(raw, point.ts_ns))
                if keep.admit(line):
                    self.archive.append([line])
                    point.advance(line)
                    moved = True
        finally:
            with self._lock:
                self._stream = None
            _close(stream)
        self._last_error = ""
        return moved or time.monotonic() - started >= self.timing.cap_s

    def _end(self) -> str | None:
        """How the pod ended (its phase, or ``deleted``), or None while it runs."""
        with self._lock:
            if self._deleted:
                return "deleted"
        try:
            pod = self.client.get(ObjectRef("v1", "Pod", self.namespace, self.meta.pod))
        except NotFound:
            return "deleted"
        except KubeError as exc:
            self._note(exc)
            return None
        return str(pod["status"]["phase"]) if pod_ended(pod) else None

    def _final(self, point: ResumePoint, end: str) -> bool:
        """Archive what the pod's log holds past ``point`` and complete the archive; False
        when the log could not be read (tried again later)."""
        lines: list[Line] = []
        keep = ResumeFilter(point)
        try:
            for raw in self._logs(point, follow=False):
                line = self._masked(parse_line(raw, point.ts_ns))
                if keep.admit(line):
                    lines.append(line)
        except NotFound:  # its log went with it: what was archived is all there is
            if self._fragment is not None:
                line = self._masked(parse_line(self._fragment, point.ts_ns))
                lines = [line] if keep.admit(line) else []
        except KubeError as exc:
            self._note(exc)
            return False
        self.archive.append(lines)
        for line in lines:
            point.advance(line)
        self.archive.finish(end)
        return True

    def _logs(self, point: ResumePoint, *, follow: bool) -> Iterator[bytes]:
        return self.client.pod_logs(
            self.namespace,
            self.meta.pod,
            self.meta.container,
            follow=follow,
            since_time=point.since_time,
            timestamps=True,
        )

    def _masked(self, line: Line) -> Line:
        return line if self.mask is None else replace(line, content=self.mask(line.content))

    def _note(self, exc: KubeError) -> None:
        """One line per error, not one per retry: again only when it changes."""
        text = str(exc)
        if text != self._last_error:
            log.warning("pod logs %s: %s", self.where, text)
            self._last_error = text


def _close(stream: Iterator[bytes] | None) -> None:
    closer = getattr(stream, "close", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            closer()
