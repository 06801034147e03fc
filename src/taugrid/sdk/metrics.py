"""Metrics from the workload: one JSON line per :func:`log` call in ``$TAU_METRICS_FILE``.

Each line is ``{"step": int|null, "time": epoch seconds, "values": {name: number|null}}``.
The file is opened once in append mode and every line goes out in a single ``os.write``
(no user-space buffering, no fsync): lines from several processes or threads never
interleave, a crash loses at most the line being written, and thousands of calls per
second cost little. Non-finite floats (nan, inf) are written as null. Stdlib only.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from typing import Any

ENV_METRICS = "TAU_METRICS_FILE"

_lock = threading.Lock()
_fd: int | None = None
_fd_path: str | None = None
_warned = False


def _number(name: str, value: object) -> int | float | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str | bytes | bytearray) or value is None:
        raise TypeError(f"metric {name}={value!r} is not a number")
    # NumPy scalars, 0-d arrays and tensors, Decimal, Fraction: anything that converts.
    if hasattr(value, "__index__"):
        try:
            return int(value.__index__())
        except (TypeError, ValueError):
            pass  # e.g. a float 0-d array: has __index__, refuses it
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise TypeError(f"metric {name}={value!r} is not a number ({exc})") from None
    return f if math.isfinite(f) else None


def _open(path: str) -> int:
    global _fd, _fd_path
    if _fd is not None and _fd_path == path:
        return _fd
    if _fd is not None:
        os.close(_fd)
        _fd = None
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    # A writer that died mid-line left no newline: start on a fresh line.
    size = os.fstat(fd).st_size
    if size:
        with open(path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                os.write(fd, b"\n")
    _fd, _fd_path = fd, path
    return fd


def log(step: int | None = None, **metrics: float | int) -> None:
    """Append one line of metrics, e.g. ``taugrid.log(step, loss=0.31, lr=3e-4)``.

    Values must be numbers (int, float, bool, or anything ``float()`` accepts that is not
    a string, such as NumPy scalars); anything else raises ``TypeError``. A no-op (with one
    warning on stderr) when ``$TAU_METRICS_FILE`` is not set.
    """
    global _warned
    if step is not None:
        if isinstance(step, bool) or not hasattr(step, "__index__"):
            raise TypeError(f"step must be an int or None, not {type(step).__name__}")
        step = int(step.__index__())
    values = {name: _number(name, v) for name, v in metrics.items()}
    path = os.environ.get(ENV_METRICS)
    if not path:
        if not _warned:
            _warned = True
            sys.stderr.write(f"taugrid: {ENV_METRICS} is not set; taugrid.log() does nothing\n")
        return
    line = json.dumps(
        {"step": step, "time": time.time(), "values": values},
        allow_nan=False,
        separators=(",", ":"),
    )
    data = (line + "\n").encode()
    with _lock:
        fd = _open(path)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record of a metrics file, in order. A last line cut short by a crash (or
    still being written) is ignored, as is any other line that is not a JSON object."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    records: list[dict[str, Any]] = []
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records
