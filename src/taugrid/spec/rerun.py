"""A new run from a recorded one, with more overrides (``tau rerun``). Pure functions.

The new spec is what ``tau run`` would have resolved with the record's overrides followed
by the new ones: the recorded spec file text (or, for ``tau run -- CMD``, the recorded
command) is read again, every override applied in order, validated with the tau.yaml
models, ``${VAR}`` expanded and hashed exactly as the loader does. Resolving from the
recorded source rather than patching the stored resolved spec keeps ``${VAR}`` right:
``--set env.LR=0.1`` also changes a ``command: python train.py --lr ${LR}``. The code is
the recorded snapshot; nothing in the current directory is looked at.

A bad override raises :class:`~taugrid.errors.SpecError` (exit 2) naming the ``--set``
that caused it; nothing is submitted then.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from taugrid.domain.fingerprint import spec_hash
from taugrid.errors import SpecError, SpecProblem

# The loader's own expansion and canonical form, so a rerun hashes as `tau run` does.
from taugrid.spec.loader import COMMAND_LINE, expanded, resolved_data
from taugrid.spec.messages import pydantic_message
from taugrid.spec.models import TauSpec, cross_field_problems
from taugrid.spec.overrides import Override, apply_overrides, parse_overrides
from taugrid.spec.yamlsrc import Document, format_loc, read_yaml


@dataclass(frozen=True)
class Respecified:
    overrides: list[str]  # recorded ones, then the new ones
    resolved: dict[str, Any]
    spec_hash: str


def respec(spec_record: dict[str, Any], new_overrides: list[str]) -> Respecified:
    """Resolve a run record's ``spec`` again with ``new_overrides`` after its own."""
    source: str = spec_record["source"]
    text: str | None = spec_record.get("file_text")
    recorded: list[str] = list(spec_record.get("overrides") or [])
    resolved: dict[str, Any] = spec_record["resolved"]

    # Every problem is reported at once, as the loader does: malformed overrides first.
    new, problems = parse_overrides(new_overrides)
    old, old_problems = parse_overrides(recorded)
    problems += [
        SpecProblem(p.file, p.line, p.col, p.field, f"{p.message} (recorded override)")
        for p in old_problems
    ]

    if text is not None and source != COMMAND_LINE:
        doc, yaml_problems = read_yaml(text, source)
        if doc is None or not isinstance(doc.data, dict):
            yaml_problems = yaml_problems or [
                SpecProblem(source, 1, 1, "", "recorded spec is not a mapping")
            ]
            raise SpecError(yaml_problems + problems)
    else:
        # `tau run -- CMD`: the record keeps the command it resolved to.
        doc = Document(data={"command": copy.deepcopy(resolved["command"])})
    data: dict[str, Any] = doc.data
    overrides = [*old, *new]
    apply_overrides(data, overrides)
    if data.get("name") is None:
        data["name"] = resolved["name"]  # the default the first submit derived

    def cause_of(loc: tuple[str | int, ...]) -> Override | None:
        cause = None
        for o in overrides:  # the most specific override at or above loc; later wins
            if loc[: len(o.path)] == o.path and (cause is None or len(o.path) >= len(cause.path)):
                cause = o
        return cause

    def locate(loc: tuple[str | int, ...], message: str) -> SpecProblem:
        field = format_loc(loc)
        cause = cause_of(loc)
        if cause is not None:
            return SpecProblem(cause.source, None, None, field, message)
        probe, pos = loc, None
        while pos is None and probe:
            pos = doc.values.get(probe)
            probe = probe[:-1]
        return SpecProblem(
            source, pos.line if pos else None, pos.col if pos else None, field, message
        )

    spec: TauSpec | None = None
    try:
        spec = TauSpec.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc: tuple[str | int, ...] = tuple(error["loc"])
            loc = loc[:-1] if loc[-1:] == ("[key]",) else loc
            raw = None if cause_of(loc) else doc.raw.get(loc)
            problems.append(locate(loc, pydantic_message(error, loc, raw)))
    if spec is not None:
        problems += [locate(loc, msg) for loc, msg in cross_field_problems(spec)]
    if problems or spec is None:
        raise SpecError(problems)

    spec = expanded(spec)
    new_resolved = resolved_data(spec)
    return Respecified(
        overrides=[*recorded, *new_overrides],
        resolved=new_resolved,
        spec_hash=spec_hash(new_resolved),  # the server checks it against its own
    )


def rerun_payload(
    record: dict[str, Any], new_overrides: list[str], submitter: str
) -> dict[str, Any]:
    """The ``POST /runs`` body for a rerun of ``record`` (a run detail).

    The server, not this function, decides whether it is allowed: ``rerun_of`` must name
    a run of the same workspace that the caller may change (their own, or any as a
    maintainer), and the recorded snapshot must have been uploaded for that workspace.
    """
    spec = record["spec"]
    again = respec(spec, new_overrides)
    code = record.get("code")
    return {
        "spec_source": spec["source"],
        "file_text": spec.get("file_text"),
        "overrides": again.overrides,
        "resolved": again.resolved,
        "spec_hash": again.spec_hash,
        "snapshot_digest": spec["snapshot_digest"],
        "submitter": submitter,
        "env": dict(record.get("env") or {}),
        "code": {"git": code.get("git")} if code else None,
        "python_env": record.get("python_env"),
        "rerun_of": record["id"],
    }
