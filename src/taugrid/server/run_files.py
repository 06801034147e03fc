"""What a run left behind, as the API and the engine show it: checkpoints and metrics,
read through the artifact store port.

The workload writes metrics lines through the SDK (``taugrid.sdk``); nothing in them is
trusted: a line of another shape is skipped, never allowed to raise in the engine.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from taugrid.ports.artifacts import ArtifactStore, CheckpointInfo
from taugrid.ports.executor import AttemptKey

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


def metrics_series(
    artifacts: ArtifactStore, run_id: str, attempts: int, attempt: int | None
) -> list[dict[str, Any]]:
    """Every point of the run's attempts (or of one), in order."""
    wanted = range(attempts) if attempt is None else [attempt]
    series = []
    for k in wanted:
        key, offset, rest = AttemptKey(run_id, k), 0, b""
        while data := artifacts.read_metrics(key, offset, MAX_METRICS_READ):
            offset += len(data)
            *lines, rest = (rest + data).split(b"\n")
            for line in lines:
                point = parse_point(line)
                if point is not None:
                    series.append({"attempt": k, **point})
        point = parse_point(rest) if rest else None
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

    def __init__(self, artifacts: ArtifactStore) -> None:
        self.artifacts = artifacts
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
            self._read_new(AttemptKey(run_id, attempt), tail)
            due = final or time.monotonic() - tail.flushed_at >= METRICS_FLUSH_S
            if final:
                del self._tails[key]
            if not (tail.dirty and due):
                return None
            tail.dirty = False
            tail.flushed_at = time.monotonic()
            return dict(tail.latest)

    def _read_new(self, key: AttemptKey, tail: _Tail) -> None:
        data = self.artifacts.read_metrics(key, tail.offset, MAX_METRICS_READ)
        if not data:
            return
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
