"""Pydantic errors rewritten for people editing YAML.

Pydantic says "Input should be a valid string"; a tau.yaml author needs "must be a string;
YAML reads 3e-4 as a number, write "3e-4"". The wording here is part of the user interface.
"""

from __future__ import annotations

import datetime
from typing import Any

from pydantic_core import ErrorDetails

from taugrid.spec.paths import UnknownPath, did_you_mean, literal_values, model_keys, type_at
from taugrid.spec.yamlsrc import Loc


def yaml_kind(value: object) -> str:
    """What YAML made of a value, in YAML's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, datetime.date):
        return "a date"
    return type(value).__name__


def _got(value: object, raw: str | None) -> str:
    if isinstance(value, (dict, list)) or value is None:
        return f"got {yaml_kind(value)}"
    return f"got {yaml_kind(value)} {_shown(value, raw)}"


def _shown(value: object, raw: str | None) -> str:
    # Numbers as the user wrote them (1e3, not 1000.0); strings quoted so blanks show.
    if isinstance(value, str) or raw is None:
        return repr(value)
    return raw


def _number(bound: object) -> str:
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)


def _type_at(loc: Loc) -> Any:
    try:
        return type_at(loc)
    except UnknownPath:
        return None


def _unknown_field(loc: Loc) -> str:
    key = str(loc[-1])
    allowed = model_keys(_type_at(loc[:-1])) or []
    hint = did_you_mean(key, allowed)
    if not hint and allowed:
        hint = f" (allowed: {', '.join(allowed)})"
    return f"unknown field {key!r}{hint}"


def pydantic_message(error: ErrorDetails, loc: Loc, raw: str | None) -> str:
    """One user-facing sentence for one pydantic error at ``loc``.

    ``raw`` is the scalar's text as written in the file, when the value came from it.
    """
    kind = error["type"]
    value = error.get("input")
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    if kind == "missing":
        if loc == ("command",):
            return "required: the command to run (a string for the shell, or a list of argv)"
        return "required field is missing"
    if kind == "extra_forbidden":
        return _unknown_field(loc)
    if kind == "string_type":
        if raw is not None and not isinstance(value, (dict, list)) and value is not None:
            return f'must be a string; YAML reads {raw} as {yaml_kind(value)}, write "{raw}"'
        return f"must be a string, {_got(value, raw)}"
    if kind in ("int_type", "int_from_float"):
        return f"must be an integer, {_got(value, raw)}"
    if kind == "float_type":
        return f"must be a number, {_got(value, raw)}"
    if kind == "list_type":
        return f"must be a list, {_got(value, raw)}"
    if kind in ("dict_type", "model_type"):
        hint = " (remove the key to get the defaults)" if value is None else ""
        return f"must be a mapping, {_got(value, raw)}{hint}"
    if kind == "greater_than_equal":
        return f"must be at least {_number(ctx['ge'])}, got {_shown(value, raw)}"
    if kind == "greater_than":
        return f"must be greater than {_number(ctx['gt'])}, got {_shown(value, raw)}"
    if kind == "literal_error":
        options = ", ".join(literal_values(_type_at(loc)))
        if not isinstance(value, str):
            return f"must be one of {options}, {_got(value, raw)}"
        hint = did_you_mean(value, literal_values(_type_at(loc)))
        return f"unknown value {value!r}{hint} (one of: {options})"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return str(error["msg"])
