"""Which fields of a spec have no effect in a mode today, so the CLI can say so.

A table rather than code: when a feature lands, its row goes away.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from taugrid.spec.models import TauSpec

Mode = Literal["local", "cluster"]
_BOTH: frozenset[Mode] = frozenset(("local", "cluster"))
_LOCAL: frozenset[Mode] = frozenset(("local",))


@dataclass(frozen=True)
class _Row:
    modes: frozenset[Mode]
    field: str  # dotted path into the spec
    inactive: Callable[[object], bool]  # given the field's value: is it set to no effect?
    why: str


_ROWS: tuple[_Row, ...] = (
    _Row(
        _LOCAL, "image", lambda v: v is not None, "local mode runs in the submitter's environment"
    ),
    _Row(_LOCAL, "nodes", lambda v: v != 1, "local mode runs on one machine: refused at submit"),
    _Row(
        _LOCAL,
        "launcher",
        lambda v: v == "ray",
        "local mode starts commands and torchrun, not Ray: refused at submit",
    ),
)


def _value(spec: TauSpec, path: str) -> object:
    value: object = spec
    for part in path.split("."):
        value = getattr(value, part)
    return value


def inactive_fields(spec: TauSpec, mode: Mode) -> list[str]:
    """Sentences naming each field that is set but has no effect in ``mode`` today."""
    sentences = []
    for row in _ROWS:
        value = _value(spec, row.field)
        if mode in row.modes and row.inactive(value):
            shown = ", ".join(value) if isinstance(value, dict) else value
            sentences.append(f"{row.field}: {shown} has no effect in {mode} mode ({row.why})")
    return sentences
