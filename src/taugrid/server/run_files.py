"""What a run left on disk, read for the API and the engine: checkpoints and metrics.

The workload writes these through the SDK (``taugrid.sdk``); the server only reads them.
Checkpoints are verified with the SDK's own functions, so "verified" means the same thing
to the workload that resumes and to the person looking at ``tau status``.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from taugrid.errors import NotFound
from taugrid.executors.local.executor import LocalExecutor
from taugrid.sdk.checkpoint import CheckpointInfo, list_checkpoints, newest_verified
from taugrid.server.safe_files import open_beneath

# metrics_last is written to the database at most this often per run while it runs.
METRICS_FLUSH_S = 2.0


def checkpoint_out(info: CheckpointInfo, *, files: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step": info.step,
        "name": info.path.name,
        "created_at": info.time or 0.0,
        "attempt": info.attempt,
        "size": info.size,
        "file_count": info.file_count,
        "verified": info.verified,
        "problem": info.problem,
    }
    if files:
        out["files"] = [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in info.files]
    return out


class RunFiles:
    def __init__(self, executor: LocalExecutor) -> None:
        self.executor = executor

    # -- checkpoints ----------------------------------------------------------------------
    def checkpoints(self, run_id: str, *, full: bool = False) -> list[CheckpointInfo]:
        """Newest step first. ``full`` hashes every file; otherwise the manifest, presence
        and sizes are checked (the engine hashes the one it resumes from)."""
        return list_checkpoints(self.executor.checkpoint_dir(run_id), full=full)

    def resume_point(
        self, run_id: str, *, fault_at: float | None = None
    ) -> tuple[CheckpointInfo | None, list[CheckpointInfo]]:
        """The newest checkpoint whose manifest and sha256 verify, and the newer ones
        skipped (corrupt, partial, or written after a hardware fault)."""
        return newest_verified(
            self.executor.checkpoint_dir(run_id), exclude_written_after=fault_at, full=True
        )

    def open_checkpoint_file(self, run_id: str, step: int, rel: str) -> int:
        """A read-only fd of one file of a checkpoint, opened beneath the run's checkpoint
        directory without following a link (server/safe_files.py)."""
        found = [c for c in self.checkpoints(run_id) if c.step == step]
        if not found:
            raise NotFound(f"run {run_id} has no checkpoint at step {step}")
        ckpt = found[0]
        what = f"checkpoint step {step} of run {run_id}"
        if rel not in {f.path for f in ckpt.files} and rel != "tau-checkpoint.json":
            raise NotFound(f"{what} has no file '{rel}'")
        root = self.executor.checkpoint_dir(run_id)
        return open_beneath(root, f"{ckpt.path.name}/{rel}", what)

    # -- metrics --------------------------------------------------------------------------
    def metrics(self, run_id: str, attempts: int, attempt: int | None) -> list[dict[str, Any]]:
        wanted = range(attempts) if attempt is None else [attempt]
        series = []
        for k in wanted:
            with _open_regular(self.executor.metrics_file(run_id, k)) as f:
                for line in f if f is not None else ():
                    point = parse_point(line)
                    if point is not None:
                        series.append({"attempt": k, **point})
        return series


def parse_point(line: bytes) -> dict[str, Any] | None:
    """One metrics line as ``{"step", "time", "values"}``, or None for anything else.

    The workload writes this file, so nothing in it is trusted: a line that is not the
    SDK's shape (a list for ``time``, a string step, JSON nested a thousand deep) is
    skipped, never allowed to raise in the engine or to reach a response model.
    """
    if len(line) > MAX_METRICS_LINE:
        return None
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    step, at, values = raw.get("step"), raw.get("time", 0.0), raw.get("values") or {}
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        return None
    if not isinstance(at, int | float) or isinstance(at, bool) or not isinstance(values, dict):
        return None
    return {
        "step": step,
        "time": float(at),
        "values": {str(k)[:MAX_METRIC_NAME]: _num(v) for k, v in values.items()},
    }


MAX_METRICS_LINE = 64 * 1024  # the SDK's lines are far shorter
MAX_METRIC_NAME = 200
MAX_METRICS_KEPT = 1000  # distinct metric names kept as a run's metrics_last
MAX_METRICS_READ = 8 << 20  # per engine poll: a flood is read over several passes


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


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


@dataclass
class _Tail:
    offset: int = 0
    latest: dict[str, Any] = field(default_factory=dict)  # {"step", "time", "values"}
    flushed_at: float = 0.0
    dirty: bool = False


class MetricsTracker:
    """Follows each running attempt's metrics file from where it last read, so a pass
    costs one ``stat`` per run; keeps the latest value of every metric for ``metrics_last``.
    """

    def __init__(self, executor: LocalExecutor) -> None:
        self.executor = executor
        self._tails: dict[tuple[str, int], _Tail] = {}
        self._lock = threading.Lock()

    def poll(
        self, run_id: str, attempt: int, stored: dict[str, Any] | None, *, final: bool = False
    ) -> dict[str, Any] | None:
        """The new ``metrics_last`` to store, or None when nothing needs writing now."""
        key = (run_id, attempt)
        with self._lock:
            tail = self._tails.get(key)
            if tail is None:
                tail = self._tails[key] = _Tail(latest=dict(stored or {}))
            self._read_new(self.executor.metrics_file(run_id, attempt), tail)
            due = final or time.monotonic() - tail.flushed_at >= METRICS_FLUSH_S
            if final:
                del self._tails[key]
            if not (tail.dirty and due):
                return None
            tail.dirty = False
            tail.flushed_at = time.monotonic()
            return dict(tail.latest)

    @staticmethod
    def _read_new(path: Path, tail: _Tail) -> None:
        with _open_regular(path) as f:
            if f is None:
                return
            size = os.fstat(f.fileno()).st_size
            if size <= tail.offset:
                return
            f.seek(tail.offset)
            data = f.read(min(size - tail.offset, MAX_METRICS_READ))
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        if end == 0 and len(data) == MAX_METRICS_READ:
            end = len(data)  # one endless line: skip it rather than stall on it
        tail.offset += end
        for line in data[:end].splitlines():
            point = parse_point(line)
            if point is None:
                continue
            known = tail.latest.get("values", {})
            new = {k: v for k, v in point["values"].items() if k in known}
            for k, v in point["values"].items():  # bounded: it becomes a database row
                if k not in known and len(known) + len(new) < MAX_METRICS_KEPT:
                    new[k] = v
            values = {**known, **new}
            tail.latest = {"step": point["step"], "time": point["time"], "values": values}
            tail.dirty = True
