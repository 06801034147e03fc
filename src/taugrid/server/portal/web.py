"""Templates and responses of the portal: one Jinja2 environment (autoescaped), the
filters the templates share, and the headers every page carries.

The Content-Security-Policy allows the portal's own scripts and styles only: no inline
script, no inline style, no eval (htmx is configured not to need them), no framing.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

# How each state reads: a word and a symbol, never colour alone.
STATE_MARKS = {
    "PENDING": "○",
    "QUEUED": "◔",
    "ADMITTED": "◑",
    "RUNNING": "▶",
    "RESTARTING": "↻",
    "PREEMPTED": "‖",
    "SUCCEEDED": "✓",
    "FAILED": "✗",
    "CANCELLED": "⊘",
}


def ago(at: float | None, now: float | None = None) -> str:
    if at is None:
        return "—"
    s = max(0.0, (time.time() if now is None else now) - at)
    if s < 60:
        return f"{s:.0f} s ago"
    if s < 3600:
        return f"{s / 60:.0f} min ago"
    if s < 172800:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.0f} d ago"


def when(at: float | None) -> str:
    if at is None:
        return "—"
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(start: float | None, end: float | None, now: float | None = None) -> str:
    if start is None:
        return "—"
    s = max(0.0, (end if end is not None else (time.time() if now is None else now)) - start)
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def quantity(value: Any, resource: str = "") -> str:
    """A quota or usage number as people read it (memory in GiB, CPU in cores)."""
    if value is None:
        return "—"
    if resource == "memory":
        return f"{value / 2**30:.1f} GiB"
    if resource == "cpu":
        return f"{value / 1000:g}"
    return str(value)


def number(value: Any) -> str:
    """A metric value, to four significant digits (the table compares, the chart shows)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—" if value is None else str(value)
    return f"{value:.4g}"


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,  # a template naming a missing value fails its test
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(ago=ago, when=when, quantity=quantity, number=number)
    env.globals.update(duration=duration, state_marks=STATE_MARKS)
    return env


TEMPLATES = _env()


def page(name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    """A template rendered with the portal's headers."""
    html = TEMPLATES.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
