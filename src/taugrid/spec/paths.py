"""Walk the TauSpec model types along a path (``resources.gpus``, ``env.LR``).

Both the override parser (is this path known? is its value a string?) and the error
mapper (which keys were allowed here? which literals?) need the declared type at a path,
so it lives in one place and is derived from the models, never listed by hand.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from taugrid.spec.models import TauSpec
from taugrid.spec.yamlsrc import format_loc


class UnknownPath(ValueError):
    """A path that no field of tau.yaml has; the message is fit to show the user."""


def did_you_mean(word: str, options: Sequence[str]) -> str:
    """``", did you mean 'command'?"`` for a near miss, else an empty string."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f", did you mean {close[0]!r}?" if close else ""


def _strip(annotation: Any) -> Any:
    """Drop ``Annotated`` metadata (not ``None`` from optionals: see :func:`is_optional`)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def union_members(annotation: Any) -> list[Any]:
    annotation = _strip(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        return [_strip(arg) for arg in get_args(annotation)]
    return [annotation]


def is_optional(annotation: Any) -> bool:
    return type(None) in union_members(annotation)


def concrete(annotation: Any) -> Any:
    """The type without ``Annotated`` and without ``None``; a real union stays a union."""
    members = [m for m in union_members(annotation) if m is not type(None)]
    return members[0] if len(members) == 1 else _strip(annotation)


def model_keys(annotation: Any) -> list[str] | None:
    """Allowed keys when the type at a path is a model; None for free-form mappings."""
    target = concrete(annotation)
    if isinstance(target, type) and issubclass(target, BaseModel):
        return list(target.model_fields)
    return None


def literal_values(annotation: Any) -> list[str]:
    """Allowed values when the type (or its list items) is a ``Literal``."""
    target = concrete(annotation)
    if get_origin(target) is list:
        target = concrete(get_args(target)[0])
    if get_origin(target) is Literal:
        return [str(v) for v in get_args(target)]
    return []


def type_at(loc: Sequence[str | int]) -> Any:
    """The declared type at ``loc``, starting from TauSpec; raises :class:`UnknownPath`."""
    annotation: Any = TauSpec
    for depth, part in enumerate(loc):
        target = concrete(annotation)
        where = format_loc(tuple(loc[:depth]))
        origin = get_origin(target)
        if isinstance(target, type) and issubclass(target, BaseModel):
            fields = target.model_fields
            if not isinstance(part, str) or part not in fields:
                place = f" in {where}" if where else ""
                hint = did_you_mean(str(part), list(fields))
                raise UnknownPath(f"unknown field {part!r}{place}{hint}")
            annotation = fields[part].annotation
        elif origin is dict:
            annotation = get_args(target)[1]
        elif origin is list and isinstance(part, int):
            annotation = get_args(target)[0]
        else:
            kind = "a list" if origin is list else "a single value"
            raise UnknownPath(f"{where} is {kind} and has no field {part!r}; set it whole")
    return annotation
