"""Load, override, validate and resolve a ``tau.yaml`` into a :class:`LoadedSpec`.

Every problem found is collected and raised together as one :class:`SpecError`, each
located as ``file:line:col: field: message`` (the value's position; the key's for unknown
keys; the parent mapping's for a missing field). Problems caused by ``--set`` point at
the override text instead. See :mod:`taugrid.spec.expand` for ``${VAR}`` rules.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from taugrid.errors import SpecError, SpecProblem
from taugrid.spec.expand import expand, expand_env
from taugrid.spec.messages import pydantic_message
from taugrid.spec.models import NAME_MAX, TauSpec, cross_field_problems
from taugrid.spec.overrides import Override, apply_overrides, parse_overrides
from taugrid.spec.yamlsrc import Document, Loc, Pos, format_loc, read_text, read_yaml

COMMAND_LINE = "<command line>"


@dataclass(frozen=True)
class LoadedSpec:
    source: str  # the file path as given, or "<command line>"
    file_text: str | None  # None for `tau run -- CMD`
    overrides: list[str]
    spec: TauSpec  # validated, name filled in, ${VAR} expanded
    resolved: dict[str, Any]  # spec as JSON-able data, defaults filled, stable key order
    spec_hash: str  # sha256 hex of the canonical JSON of `resolved`
    workdir: Path  # absolute


def derive_name(text: str) -> str:
    """A valid run name from a directory or program name: ``My_Proj`` -> ``my-proj``."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower())
    name = re.sub(r"^[^a-z]+", "", name)  # must start with a letter
    name = name[:NAME_MAX].rstrip("-")
    return name or "run"


def load_spec(path: Path, overrides: Sequence[str] = ()) -> LoadedSpec:
    """Load ``tau.yaml`` at ``path``; raises :class:`SpecError` with every problem."""
    source = str(path)
    text = read_text(path)
    doc, problems = read_yaml(text, source)
    if doc is not None and doc.data is None:
        problems.append(
            SpecProblem(source, 1, 1, "", "file is empty; it needs at least `command:`")
        )
    elif doc is not None and not isinstance(doc.data, dict):
        pos = doc.values.get((), Pos(1, 1))
        problems.append(
            SpecProblem(source, pos.line, pos.col, "", "must be a mapping of fields (name: ...)")
        )
    if doc is None or not isinstance(doc.data, dict):
        _, override_problems = parse_overrides(overrides)  # still report bad --set too
        raise SpecError(problems + override_problems)
    base_dir = path.absolute().parent
    return _resolve(source, text, doc, base_dir, derive_name(base_dir.name), overrides, problems)


def spec_from_command(
    argv: Sequence[str], base_dir: Path, overrides: Sequence[str] = ()
) -> LoadedSpec:
    """The spec for ``tau run -- CMD ARGS`` with no file: argv command, workdir ``base_dir``."""
    data: dict[str, Any] = {"command": list(argv)} if argv else {}
    default_name = derive_name(PurePath(argv[0]).name) if argv else "run"
    doc = Document(data=data)
    return _resolve(COMMAND_LINE, None, doc, base_dir.absolute(), default_name, overrides, [])


def _resolve(
    source: str,
    text: str | None,
    doc: Document,
    base_dir: Path,
    default_name: str,
    override_texts: Sequence[str],
    problems: list[SpecProblem],
) -> LoadedSpec:
    overrides, override_problems = parse_overrides(override_texts)
    problems = problems + override_problems
    data: dict[str, Any] = doc.data
    apply_overrides(data, overrides)
    if data.get("name") is None:
        data["name"] = default_name
    locate = _Locator(source, doc, overrides)

    spec: TauSpec | None = None
    try:
        spec = TauSpec.model_validate(data)
    except ValidationError as exc:
        errors = _without_missing_misspelt(exc.errors())
        for error in errors:
            loc: Loc = tuple(error["loc"])
            on_key = loc[-1:] == ("[key]",) or error["type"] == "extra_forbidden"
            loc = loc[:-1] if loc[-1:] == ("[key]",) else loc
            if any(loc[: len(bad)] == bad for bad in doc.rejected) or (
                error["type"] == "missing" and loc[:-1] in doc.incomplete
            ):
                continue  # already reported as a YAML problem
            raw = doc.raw.get(loc) if locate.from_file(loc) else None
            problems.append(locate(loc, pydantic_message(error, loc, raw), on_key=on_key))
    workdir = base_dir / str(data.get("workdir", "."))
    if isinstance(data.get("workdir", "."), str) and not workdir.is_dir():
        what = "is not a directory" if workdir.exists() else "does not exist"
        problems.append(locate(("workdir",), f"{workdir} {what}"))
    if spec is not None:
        problems += [locate(loc, msg, on_key=True) for loc, msg in cross_field_problems(spec)]
    if problems or spec is None:
        # File problems in file order, then those from --set (malformed ones first).
        order = sorted(problems, key=lambda p: (p.file != source, p.line or 0, p.col or 0))
        raise SpecError(order)

    spec = expanded(spec)
    resolved = resolved_data(spec)
    canonical = json.dumps(resolved, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return LoadedSpec(
        source=source,
        file_text=text,
        overrides=list(override_texts),
        spec=spec,
        resolved=resolved,
        spec_hash=hashlib.sha256(canonical.encode()).hexdigest(),
        workdir=workdir.resolve(),
    )


def _without_missing_misspelt(errors: Sequence[ErrorDetails]) -> list[ErrorDetails]:
    """Drop "required" for a field whose misspelling is in the same mapping (``comand:``):
    the did-you-mean on the unknown key says it all; a second "command: required" at 1:1
    would only send the reader looking for a second mistake."""
    misspelt: set[Loc] = set()
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
            options = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and e["loc"]]
            close = difflib.get_close_matches(loc[-1], options, n=1, cutoff=0.6)
            if close:
                misspelt.add((*loc[:-1], close[0]))
    return [e for e in errors if not (e["type"] == "missing" and tuple(e["loc"]) in misspelt)]


class _Locator:
    """Turns a path in the data into a located SpecProblem."""

    def __init__(self, source: str, doc: Document, overrides: Sequence[Override]) -> None:
        self._source = source
        self._doc = doc
        self._overrides = overrides

    def _override_for(self, loc: Loc) -> Override | None:
        # The most specific override at or above loc; a later one wins a tie.
        best: Override | None = None
        for override in self._overrides:
            if loc[: len(override.path)] == override.path and (
                best is None or len(override.path) >= len(best.path)
            ):
                best = override
        return best

    def from_file(self, loc: Loc) -> bool:
        return self._override_for(loc) is None

    def __call__(self, loc: Loc, message: str, *, on_key: bool = False) -> SpecProblem:
        field = format_loc(loc)
        override = self._override_for(loc)
        if override is not None:
            return SpecProblem(override.source, None, None, field, message)
        pos = self._doc.keys.get(loc) if on_key else None
        probe = loc
        while pos is None and probe:
            pos = self._doc.values.get(probe)
            probe = probe[:-1]
        if pos is None:
            pos = self._doc.values.get(())
        if pos is None:
            if self._source == COMMAND_LINE:
                return SpecProblem(self._source, None, None, field, message)
            pos = Pos(1, 1)
        return SpecProblem(self._source, pos.line, pos.col, field, message)


def expanded(spec: TauSpec) -> TauSpec:
    """The spec with ``${VAR}`` expanded from its own ``env`` (see expand.py); ``tau rerun``
    re-resolves a record with it, so a rerun resolves exactly as ``tau run`` does."""
    env = expand_env(spec.env)
    update: dict[str, Any] = {"env": env}
    if isinstance(spec.command, str):
        update["command"] = expand(spec.command, env, unescape=True)
    else:
        update["command"] = [expand(arg, env, unescape=False) for arg in spec.command]
    if spec.setup is not None:
        update["setup"] = expand(spec.setup, env, unescape=True)
    # Only fields the user set, so model_fields_set still tells what was written.
    return spec.model_copy(update={k: v for k, v in update.items() if k in spec.model_fields_set})


def resolved_data(spec: TauSpec) -> dict[str, Any]:
    """The resolved spec as stored and hashed."""
    data = spec.model_dump(mode="json")
    # User-keyed mappings are sorted so the record reads the same whatever the file order.
    for key in ("env", "secrets"):
        data[key] = dict(sorted(data[key].items()))
    if data["experiment"] is not None:
        data["experiment"]["tags"] = dict(sorted(data["experiment"]["tags"].items()))
    return data
