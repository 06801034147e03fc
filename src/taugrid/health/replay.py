"""Observations recorded as JSON lines (``tau admin health record`` on a GPU machine, or a
drill's script), one object per line with the fields of ``domain.health.Observation``:
``{"kind": "xid", "gpu_uuid": "GPU-…", "node": "n1", "at": 1796000000.0, "xid": 79}``.

A line that does not parse, or names no valid observation, is refused with its line
number (``SourceError``): a replay is a test's or a drill's input, and a silently
skipped line would make it say something else. Blank lines and ``#`` comments are
skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from taugrid.domain.health import InvalidObservation, Observation
from taugrid.ports.health import SourceError

FIELDS = ("kind", "gpu_uuid", "node", "at", "xid", "value", "detail", "source")


def parse_record(doc: Any, where: str, *, node: str | None = None) -> Observation:
    """One observation from a decoded JSON object; ``node`` fills in a missing one."""
    if not isinstance(doc, dict):
        raise SourceError(f"{where}: not a JSON object")
    unknown = sorted(set(doc) - set(FIELDS))
    if unknown:
        raise SourceError(f"{where}: unknown field(s) {', '.join(unknown)}")
    fields = {k: doc[k] for k in FIELDS if k in doc}
    fields.setdefault("gpu_uuid", "")
    if node is not None:
        fields.setdefault("node", node)
    for required in ("kind", "node", "at"):
        if required not in fields:
            raise SourceError(f"{where}: no {required}")
    try:
        return Observation(**fields)
    except (InvalidObservation, TypeError) as exc:
        raise SourceError(f"{where}: {exc}") from None


def parse_lines(text: str, name: str, *, node: str | None = None) -> list[Observation]:
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            doc = json.loads(line)
        except ValueError as exc:
            raise SourceError(f"{name}:{n}: not JSON ({exc.args[0]})") from None
        out.append(parse_record(doc, f"{name}:{n}", node=node))
    return out


class ReplaySource:
    """Every observation of a file, all at the first read (their ``at`` are their own)."""

    name = "replay"
    available = True
    why = ""

    def __init__(self, path: Path, *, node: str | None = None) -> None:
        self._pending = parse_lines(path.read_text(), str(path), node=node)  # refused whole

    def read(self, timeout_s: float) -> list[Observation]:
        out, self._pending = self._pending, []
        return out

    def close(self) -> None:
        self._pending = []
