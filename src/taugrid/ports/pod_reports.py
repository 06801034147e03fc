"""The pod report port: what a cluster attempt's reporting sidecar
(``taugrid.podreport``) tells the server about files only the pod can see: the
attempt's metrics lines, and the checkpoints on a workspace's PVC with the verdict of
their verification in the pod.

Contract for implementations:

- ``append_metrics(key, offset, data)`` is idempotent by offset: the server's copy of
  the attempt's metrics file grows only at its end. ``offset`` at or before the end
  appends the part of ``data`` past the end (a resend after a lost answer appends
  nothing twice); ``offset`` past the end raises :class:`OffsetAhead` with the size the
  server has (the sender resends from there: what a restarted server lost comes again
  from the pod's file). It returns the size after the append, which the sender resumes
  from. A copy over ``max_bytes`` is refused (``ReportTooLarge``) and left as it is.
- ``put_checkpoints(key, entries)`` replaces what the run's pods last said they see
  (the PVC is the run's, shared by its attempts); a report from an older attempt than
  the one stored is ignored. Durable when it returns.
- Both block briefly (a local file write) and never raise an OS error for a caller's
  data: bad input is ``UsageError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from taugrid.errors import TauError
from taugrid.ports.executor import AttemptKey


class OffsetAhead(TauError):
    """The sender is ahead of the server's copy: resend from ``size``."""

    code = "report_offset_ahead"
    http_status = 409

    def __init__(self, size: int) -> None:
        super().__init__(f"the server has {size} bytes of this attempt's metrics")
        self.size = size

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "size": self.size}


class ReportTooLarge(TauError):
    code = "report_too_large"
    http_status = 413


@dataclass(frozen=True)
class ReportedCheckpoint:
    """One ``step-*`` directory as the pod saw it: its manifest's text (None when it
    could not be read) and why it does not verify in full in the pod (None: it does)."""

    step: int
    manifest: str | None
    problem: str | None


class PodReportSink(Protocol):
    def append_metrics(self, key: AttemptKey, offset: int, data: bytes) -> int: ...

    def put_checkpoints(self, key: AttemptKey, entries: list[ReportedCheckpoint]) -> None: ...
