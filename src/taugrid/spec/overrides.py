"""``--set key=value`` overrides, applied to the file's data before validation.

The key is a dotted path (``resources.gpus``, ``env.LR``, ``experiment.tags.lr``). The
value is read as YAML (``2`` is an int, ``[a, b]`` a list) unless the field is declared as
a string: then the text is kept as typed, so ``--set env.LR=1e-3`` stays ``"1e-3"`` and
``--set name=true`` is a name, not a boolean. An empty value unsets an optional field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_origin

from taugrid.errors import SpecProblem
from taugrid.spec.paths import UnknownPath, is_optional, type_at, union_members
from taugrid.spec.yamlsrc import read_yaml

OVERRIDE_FILE = "--set"


@dataclass(frozen=True)
class Override:
    text: str  # as the user typed it, for error messages and the record
    path: tuple[str, ...]
    value: object

    @property
    def source(self) -> str:
        return f"{OVERRIDE_FILE} {self.text}"


def _value(raw: str, annotation: Any) -> tuple[object, str | None]:
    """The override's value for a field of this type, or an error message."""
    if raw == "" and is_optional(annotation):
        return None, None
    members = [m for m in union_members(annotation) if m is not type(None)]
    if str in members:
        # A string field keeps the raw text; `command` also takes a YAML list.
        wants_list = any(get_origin(m) is list for m in members)
        if not (wants_list and raw.lstrip().startswith("[")):
            return raw, None
    doc, problems = read_yaml(raw, OVERRIDE_FILE)
    if problems or doc is None:
        return None, problems[0].message if problems else f"invalid YAML: {raw!r}"
    return doc.data, None


def parse_overrides(texts: Sequence[str]) -> tuple[list[Override], list[SpecProblem]]:
    """Parse ``key=value`` strings; every malformed one becomes a problem."""
    overrides: list[Override] = []
    problems: list[SpecProblem] = []

    def problem(field: str, message: str) -> None:
        problems.append(SpecProblem(OVERRIDE_FILE, None, None, field, message))

    for text in texts:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep:
            problem(key, f"{text!r} is not key=value (e.g. --set resources.gpus=2)")
            continue
        path = tuple(key.split("."))
        if not key or any(not part for part in path):
            problem(key, f"{text!r} has an empty key or path segment")
            continue
        try:
            annotation = type_at(path)
        except UnknownPath as exc:
            problem(key, str(exc))
            continue
        value, error = _value(raw, annotation)
        if error is not None:
            problem(key, error)
            continue
        overrides.append(Override(text, path, value))
    return overrides, problems


def apply_overrides(data: dict[str, Any], overrides: Sequence[Override]) -> None:
    """Set each override's value in ``data`` in order (a later one wins)."""
    for override in overrides:
        node = data
        for part in override.path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                # An override wins over whatever the file had here (or nothing at all).
                child = {}
                node[part] = child
            node = child
        node[override.path[-1]] = override.value
