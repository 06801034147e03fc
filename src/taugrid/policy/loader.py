"""Load and validate ``policy.yaml`` into a :class:`LoadedPolicy`.

Every problem is collected and raised together as one :class:`SpecError`, each located
as ``file:line:col: field: message`` (the value's position; the key's for unknown keys;
the parent mapping's for a missing field), exactly like tau.yaml: the YAML reader, the
wording of type errors and the path helpers are the spec package's.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from taugrid.errors import SpecError, SpecProblem
from taugrid.policy.checks import cross_problems
from taugrid.policy.models import Policy
from taugrid.spec.messages import pydantic_message, yaml_kind
from taugrid.spec.paths import concrete, did_you_mean, model_keys
from taugrid.spec.yamlsrc import Document, Loc, Pos, format_loc, read_text, read_yaml

DEFAULT_SOURCE = "<policy>"


@dataclass(frozen=True)
class LoadedPolicy:
    source: str  # the file path as given, or a name for text from elsewhere
    text: str
    policy: Policy
    policy_hash: str  # sha256 hex of the canonical JSON of the validated policy


def policy_hash(policy: Policy) -> str:
    """A stable digest of what a policy means (formatting and comments do not count)."""
    data = policy.model_dump(mode="json")
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def load_policy(path: Path) -> LoadedPolicy:
    """Load ``policy.yaml`` at ``path``; raises :class:`SpecError` with every problem."""
    source = str(path)
    text = read_text(path)
    return load_policy_text(text, source)


def load_policy_text(text: str, source: str = DEFAULT_SOURCE) -> LoadedPolicy:
    """Validate policy text (from a file, or sent to the server); ``source`` names it."""
    doc, problems = read_yaml(text, source)
    if doc is not None and doc.data is None:
        problems.append(
            SpecProblem(
                source,
                1,
                1,
                "",
                "file is empty; a policy needs flavors, cluster_queues and "
                "workspaces (see docs/policy.md)",
            )
        )
    elif doc is not None and not isinstance(doc.data, dict):
        pos = doc.values.get((), Pos(1, 1))
        problems.append(
            SpecProblem(
                source, pos.line, pos.col, "", "must be a mapping of sections (flavors: ...)"
            )
        )
    if doc is None or not isinstance(doc.data, dict):
        raise SpecError(problems)

    data: dict[str, Any] = doc.data
    reported: list[Loc] = sorted(doc.rejected)  # YAML-level problems already said
    policy: Policy | None = None
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc: Loc = tuple(error["loc"])
            on_key = loc[-1:] == ("[key]",) or error["type"] == "extra_forbidden"
            loc = loc[:-1] if loc[-1:] == ("[key]",) else loc
            if _under(loc, doc.rejected) or (
                error["type"] == "missing" and loc[:-1] in doc.incomplete
            ):
                continue
            reported.append(loc)
            message = policy_message(error, loc, doc.raw.get(loc))
            problems.append(_locate(source, doc, loc, message, on_key=on_key))

    def line_of(loc: Loc) -> int | None:
        pos = doc.values.get(loc)
        return pos.line if pos is not None else None

    for loc, message, on_key in cross_problems(data, line_of):
        if not _under(loc, reported):  # its value is malformed: said once is enough
            problems.append(_locate(source, doc, loc, message, on_key=on_key))
    if problems or policy is None:
        unique = list(dict.fromkeys(problems))
        raise SpecError(sorted(unique, key=lambda p: (p.line or 0, p.col or 0)))
    return LoadedPolicy(source, text, policy, policy_hash(policy))


def _under(loc: Loc, bad: Sequence[Loc] | set[Loc]) -> bool:
    return any(loc[: len(b)] == b for b in bad)


def _locate(source: str, doc: Document, loc: Loc, message: str, *, on_key: bool) -> SpecProblem:
    pos = doc.keys.get(loc) if on_key else None
    probe = loc
    while pos is None and probe:
        pos = doc.values.get(probe)
        probe = probe[:-1]
    if pos is None:
        pos = doc.values.get((), Pos(1, 1))
    return SpecProblem(source, pos.line, pos.col, format_loc(loc), message)


# -- messages ---------------------------------------------------------------------------


def type_at(loc: Loc) -> Any:
    """The declared type at ``loc`` in policy.yaml, or None past the models."""
    annotation: Any = Policy
    for part in loc:
        target = concrete(annotation)
        origin = get_origin(target)
        if isinstance(target, type) and issubclass(target, BaseModel):
            field = target.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif origin is dict:
            annotation = get_args(target)[1]
        elif origin is list and isinstance(part, int):
            annotation = get_args(target)[0]
        else:
            return None
    return annotation


def _literals(loc: Loc) -> list[str]:
    target = concrete(type_at(loc))
    return [str(v) for v in get_args(target)] if get_origin(target) is Literal else []


def policy_message(error: ErrorDetails, loc: Loc, raw: str | None) -> str:
    """The spec package's wording, with the allowed keys and values of policy.yaml."""
    kind = error["type"]
    value = error.get("input")
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = model_keys(type_at(loc[:-1])) or []
        hint = did_you_mean(key, allowed) or (
            f" (allowed: {', '.join(allowed)})" if allowed else ""
        )
        return f"unknown field {key!r}{hint}"
    if kind == "literal_error":
        options = _literals(loc)
        listed = ", ".join(options)
        if isinstance(value, str):
            return f"unknown value {value!r}{did_you_mean(value, options)} (one of: {listed})"
        return f"must be one of {listed}, got {yaml_kind(value)}"
    if kind == "bool_type":
        return f"must be true or false, got {yaml_kind(value)}"
    if kind == "less_than_equal":
        shown = raw if raw is not None else repr(value)
        return f"must be at most {ctx['le']}, got {shown}"
    return pydantic_message(error, loc, raw)


def dump_policy(policy: Policy) -> str:
    """A policy as policy.yaml text (unset optional fields left out); it loads back equal."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.default_flow_style = False
    yaml.width = 4096
    out = io.StringIO()
    yaml.dump(policy.model_dump(mode="json", exclude_none=True), out)
    return out.getvalue()
