"""What a run left on disk, read for the API and the engine: checkpoints and metrics.

The workload writes these through the SDK (``taugrid.sdk``); the server only reads them.
Checkpoints are verified with the SDK's own functions, so "verified" means the same thing
to the workload that resumes and to the person looking at ``tau status``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taugrid.errors import NotFound
from taugrid.executors.local.executor import LocalExecutor
from taugrid.sdk.checkpoint import CheckpointInfo, list_checkpoints, newest_verified
from taugrid.sdk.metrics import read_metrics

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

    def checkpoint_file(self, run_id: str, step: int, rel: str) -> Path:
        found = [c for c in self.checkpoints(run_id) if c.step == step]
        if not found:
            raise NotFound(f"run {run_id} has no checkpoint at step {step}")
        ckpt = found[0]
        if rel not in {f.path for f in ckpt.files} and rel != "tau-checkpoint.json":
            raise NotFound(f"checkpoint step {step} of run {run_id} has no file '{rel}'")
        root = ckpt.path.resolve()
        path = (root / rel).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise NotFound(f"checkpoint step {step} of run {run_id} has no file '{rel}'")
        return path

    # -- metrics --------------------------------------------------------------------------
    def metrics(self, run_id: str, attempts: int, attempt: int | None) -> list[dict[str, Any]]:
        wanted = range(attempts) if attempt is None else [attempt]
        series = []
        for k in wanted:
            for point in read_metrics(self.executor.metrics_file(run_id, k)):
                series.append({"attempt": k, **_point(point)})
        return series


def _point(raw: dict[str, Any]) -> dict[str, Any]:
    values = raw.get("values") or {}
    return {
        "step": raw.get("step"),
        "time": float(raw.get("time") or 0.0),
        "values": {str(k): _num(v) for k, v in values.items()},
    }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


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
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return
        if size <= tail.offset:
            return
        with path.open("rb") as f:
            f.seek(tail.offset)
            data = f.read(size - tail.offset)
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        tail.offset += end
        for line in data[:end].splitlines():
            try:
                point = _point(json.loads(line))
            except (ValueError, AttributeError):
                continue
            values = {**tail.latest.get("values", {}), **point["values"]}
            tail.latest = {"step": point["step"], "time": point["time"], "values": values}
            tail.dirty = True
