"""Plain-text tables and time formatting for read commands.

Plain text, not rich: ``tau status`` is on the start-up budget and rich costs more to
import than the rest of the command. rich is used only for the live ``--wait`` view.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import click


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


Paint = Callable[[int, str, str], str]  # (column, cell text, padded cell) -> shown


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], paint: Paint | None = None) -> str:
    """Aligned columns; ``paint`` may wrap a padded cell in colour (widths come first, so
    escape codes never skew the alignment)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
        if paint is not None:
            cells = [
                paint(i, c, padded) for i, (c, padded) in enumerate(zip(row, cells, strict=True))
            ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# States in colour on a terminal; the word itself is always there, so colour is never the
# only way a state is told apart.
_STATE_COLOURS = {
    "SUCCEEDED": "32",  # green
    "FAILED": "31",  # red
    "CANCELLED": "33",  # yellow
    "PREEMPTED": "33",
    "RESTARTING": "33",
    "RUNNING": "36",  # cyan
    "ADMITTED": "36",
    "QUEUED": "2",  # dim
    "PENDING": "2",
}


def use_colour() -> bool:
    """Colour on a terminal unless NO_COLOR is set (https://no-color.org) or TERM=dumb;
    FORCE_COLOR asks for it when piped."""
    env = os.environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty() and env.get("TERM") != "dumb"


def state_painter(column: int) -> Paint | None:
    """A ``paint`` for :func:`table` that colours the states in ``column``; None when
    colour is off."""
    if not use_colour():
        return None

    def paint(i: int, text: str, padded: str) -> str:
        code = _STATE_COLOURS.get(text) if i == column else None
        if code is None:
            return padded
        return f"\x1b[{code}m{text}\x1b[0m{padded[len(text) :]}"

    return paint


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "-"
    return human_seconds((now or time.time()) - ts) + " ago"


def human_seconds(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.1f}s" if s < 10 else f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def duration(run: dict[str, Any], now: float | None = None) -> str:
    start = run.get("started_at")
    if start is None:
        return "-"
    return human_seconds((run.get("finished_at") or now or time.time()) - start)


def clock(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def exit_text(run: dict[str, Any]) -> str:
    code = run.get("exit_code")
    return "-" if code is None else str(code)


def isatty() -> bool:
    return sys.stdout.isatty()


output_option = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    help="Output format; json has a stable shape (docs/api.md).",
)
