"""What one submission may carry: every size and content limit in one place, and the
pure check of a submission against them.

The server refuses a submission over a limit at submit, with the field path and the
limit but never the value (which may be large, binary, or a secret), so nothing is
recorded that would only fail at launch or break a database column. The CLI runs the
same check before it archives and uploads anything.

Why these numbers:

- A string command and any ``setup`` reach the workload as one ``sh -c`` argument, and
  Linux refuses a single argument or environment entry of 128 KiB or more
  (``MAX_ARG_STRLEN``) with ``E2BIG`` at exec; the launcher adds a few bytes around
  ``setup``, hence 127 KiB. argv and the environment together must fit ``ARG_MAX``
  (a quarter of the stack limit: 2 MiB with the usual 8 MiB), hence 1 MiB of ``env``.
- A NUL cannot be passed in argv, an environment entry or a path at all, and other
  control characters in names and paths only serve to confuse terminals and logs: names,
  paths and labels allow none, free text (``command``, ``setup``, ``env`` values, the spec
  file text and ``--set`` texts) allows tab, newline and carriage return.
- Lone surrogates are not text; PostgreSQL cannot store them.
- Names are bounded by their database columns (63 for workspace, queue, priority and GPU
  type; 253 for experiment names), everything else that is not free text by ``PATH_MAX``.
- A code snapshot is bounded by what the CLI archives by default (100 MiB of files); the
  server applies the same number to the archive it receives and to its unpacked files
  (so a small archive cannot inflate without bound), and at most 200,000 members, each a
  file made at every launch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

KiB = 1024
MiB = 1024 * KiB

MAX_SNAPSHOT_BYTES = 100 * MiB
"""Code snapshot: files archived by the CLI, the uploaded archive, its unpacked files."""
MAX_SNAPSHOT_MEMBERS = 200_000
"""Files, directories and symlinks of one snapshot (each is a file created at launch)."""
MAX_SPEC_TEXT_BYTES = 1 * MiB
"""The spec file text; also all ``--set`` texts of one submission together."""
MAX_OVERRIDES = 1000
MAX_COMMAND_BYTES = 127 * KiB
"""``command`` (all its items) and ``setup`` together, UTF-8 encoded."""
MAX_ENV_VARS = 1000
"""``env`` and ``secrets`` of the spec together; also the submitter environment."""
MAX_ENV_ENTRY_BYTES = 127 * KiB
"""One ``NAME=value``."""
MAX_ENV_BYTES = 1 * MiB
"""All ``NAME=value`` entries of ``env`` (or of the submitter environment) together."""
MAX_ITEMS = 1000
"""Items of any other list or mapping of the spec (``outputs``, ``exclude``, tags...)."""
MAX_TEXT_BYTES = 4096
"""Any other string of a spec or a submission (paths, labels, durations): PATH_MAX."""
MAX_NAME_CHARS: Mapping[str, int] = {
    "workspace": 63,
    "queue": 63,
    "priority": 63,
    "resources.gpu_type": 63,
    "experiment.name": 253,
    "experiment.group": 253,
}
MAX_SUBMITTER_CHARS = 255
MAX_RUN_REF_CHARS = 63
"""``rerun_of``: a run id."""
MAX_RECORD_BYTES = 4 * MiB
"""The ``code`` and ``python_env`` records of one submission, each as JSON."""
MAX_DEPTH = 16
"""Nesting of the resolved spec (the models are at most three levels deep)."""
MAX_IDEMPOTENCY_KEY_CHARS = 128
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,128}$"
"""Printable ASCII without spaces: a UUID, a CI job id, a hash."""
MAX_SUBMIT_BODY_BYTES = 16 * MiB
"""One ``POST /runs`` body (everything above fits in well under it)."""
MAX_BATCH_BODY_BYTES = 32 * MiB
"""One ``POST /runs/batch`` body; split larger sweeps into several batches."""

Problem = tuple[str, str]  # (field path, message): never the value itself

_WORKSPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_workspace_name(name: str) -> bool:
    """What ``workspace:`` accepts, within its column: for a workspace named outside a
    spec (a query parameter)."""
    return len(name) <= MAX_NAME_CHARS["workspace"] and _WORKSPACE.match(name) is not None


_FREE_TEXT_FIELDS = frozenset({"command", "setup"})
# Names, paths, labels: no control character at all. Free text: tab, LF and CR allowed.
_BAD_IN_NAME = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_BAD_IN_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_SHOWN_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def submission_problems(
    *,
    resolved: Mapping[str, Any],
    spec_source: str = "",
    file_text: str | None = None,
    overrides: Sequence[str] = (),
    submitter: str = "",
    env: Mapping[str, str] | None = None,
    code: Any = None,
    python_env: Any = None,
    rerun_of: str | None = None,
) -> list[Problem]:
    """Every limit the submission breaks, as (field, message).

    Fields of the resolved spec are named as in ``tau.yaml`` (``outputs[0]``,
    ``env.LR``); the other fields of the request are prefixed ``request.``.
    """
    problems: list[Problem] = []
    _check_spec(resolved, problems)
    _check_string("request.spec_source", spec_source, MAX_TEXT_BYTES, problems)
    if file_text is not None:
        _check_string("request.file_text", file_text, MAX_SPEC_TEXT_BYTES, problems, text=True)
    if len(overrides) > MAX_OVERRIDES:
        problems.append(
            ("request.overrides", f"has {len(overrides)} items; at most {MAX_OVERRIDES}")
        )
    else:
        for i, text in enumerate(overrides):
            _check_string(f"request.overrides[{i}]", text, MAX_SPEC_TEXT_BYTES, problems, text=True)
        total = sum(_utf8_len(t) for t in overrides)
        if total > MAX_SPEC_TEXT_BYTES:
            problems.append(("request.overrides", _too_big(total, MAX_SPEC_TEXT_BYTES)))
    _check_string("request.submitter", submitter, MAX_TEXT_BYTES, problems)
    if len(submitter) > MAX_SUBMITTER_CHARS:
        problems.append(("request.submitter", _too_long(submitter, MAX_SUBMITTER_CHARS)))
    if rerun_of is not None:
        _check_string("request.rerun_of", rerun_of, MAX_TEXT_BYTES, problems)
        if len(rerun_of) > MAX_RUN_REF_CHARS:
            problems.append(("request.rerun_of", _too_long(rerun_of, MAX_RUN_REF_CHARS)))
    if env:
        _check_env("request.env", env, {}, problems)
    for name, record in (("request.code", code), ("request.python_env", python_env)):
        if record is not None:
            size = _utf8_len(json.dumps(record, ensure_ascii=False))
            if size > MAX_RECORD_BYTES:
                problems.append((name, _too_big(size, MAX_RECORD_BYTES) + " of JSON"))
    return problems


def _check_spec(resolved: Mapping[str, Any], problems: list[Problem]) -> None:
    command_bytes = 0
    for key in sorted(_FREE_TEXT_FIELDS):
        for path, value in _strings(resolved.get(key), (key,)):
            command_bytes += _utf8_len(value)
            _check_chars(_format(path), value, problems, text=True)
    if command_bytes > MAX_COMMAND_BYTES:
        problems.append(("command", _too_big(command_bytes, MAX_COMMAND_BYTES) + " with setup"))
    env = resolved.get("env")
    secrets = resolved.get("secrets")
    if isinstance(env, Mapping):
        _check_env("env", env, secrets if isinstance(secrets, Mapping) else {}, problems)
    for key, value in resolved.items():
        if key in _FREE_TEXT_FIELDS or key == "env":
            continue
        _check_value((key,), value, problems, depth=1)


def _check_env(
    field: str, env: Mapping[Any, Any], secrets: Mapping[Any, Any], problems: list[Problem]
) -> None:
    count = len(env) + len(secrets)
    if count > MAX_ENV_VARS:
        what = "variables (env and secrets)" if secrets else "variables"
        problems.append((field, f"has {count} {what}; at most {MAX_ENV_VARS}"))
        return  # one line, not one per variable
    total = 0
    for i, (name, value) in enumerate(env.items()):
        where = _format((field, _key(name, i)))
        if isinstance(name, str):
            _check_chars(where, name, problems, text=False)
        if not isinstance(value, str):
            continue  # the models say what type it must be
        _check_chars(where, value, problems, text=True)
        entry = _utf8_len(str(name)) + 1 + _utf8_len(value)
        total += entry
        if entry > MAX_ENV_ENTRY_BYTES:
            problems.append((where, _too_big(entry, MAX_ENV_ENTRY_BYTES) + " as NAME=value"))
    if total > MAX_ENV_BYTES:
        problems.append((field, _too_big(total, MAX_ENV_BYTES) + " in all"))


def _check_value(
    path: tuple[str | int, ...], value: Any, problems: list[Problem], depth: int
) -> None:
    field = _format(path)
    if depth > MAX_DEPTH:
        problems.append((field, f"is nested more than {MAX_DEPTH} levels deep"))
        return
    if isinstance(value, str):
        limit = MAX_NAME_CHARS.get(field)
        _check_string(field, value, MAX_TEXT_BYTES, problems)
        if limit is not None and len(value) > limit:
            problems.append((field, _too_long(value, limit)))
    elif isinstance(value, Mapping):
        if len(value) > MAX_ITEMS:
            problems.append((field, f"has {len(value)} entries; at most {MAX_ITEMS}"))
            return
        for i, (k, v) in enumerate(value.items()):
            sub = (*path, _key(k, i))
            if isinstance(k, str):
                _check_string(_format(sub), k, MAX_TEXT_BYTES, problems)
            _check_value(sub, v, problems, depth + 1)
    elif isinstance(value, list):
        if len(value) > MAX_ITEMS:
            problems.append((field, f"has {len(value)} items; at most {MAX_ITEMS}"))
            return
        for i, v in enumerate(value):
            _check_value((*path, i), v, problems, depth + 1)


def _check_string(
    field: str, value: str, max_bytes: int, problems: list[Problem], *, text: bool = False
) -> None:
    size = _utf8_len(value)
    if size > max_bytes:
        problems.append((field, _too_big(size, max_bytes)))
    _check_chars(field, value, problems, text=text)


def _check_chars(field: str, value: str, problems: list[Problem], *, text: bool) -> None:
    bad = (_BAD_IN_TEXT if text else _BAD_IN_NAME).search(value)
    if bad is None:
        return
    code = ord(bad.group())
    if 0xD800 <= code <= 0xDFFF:
        problems.append((field, "is not valid text (a lone UTF-16 surrogate)"))
        return
    name = "NUL" if code == 0 else f"U+{code:04X}"
    allowed = "; only tab, newline and carriage return are allowed" if text else ""
    problems.append((field, f"contains a control character ({name}){allowed}"))


def _strings(value: Any, path: tuple[str | int, ...]) -> list[tuple[tuple[str | int, ...], str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, list):
        return [((*path, i), v) for i, v in enumerate(value) if isinstance(v, str)]
    return []


def _key(name: Any, index: int) -> str:
    """A mapping key as a path part: shown only when it is a plain name, since anything
    else might be the offending value itself; otherwise its position, ``[#3]``."""
    return name if isinstance(name, str) and _SHOWN_KEY.match(name) else f"[#{index}]"


def _format(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("[#"):
            out += part
        else:
            out += f".{part}" if out else part
    return out


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def _too_big(size: int, limit: int) -> str:
    if _human(size) == _human(limit):  # just over: rounding would hide the difference
        return f"is {size} bytes; at most {limit} bytes ({_human(limit)})"
    return f"is {_human(size)}; at most {_human(limit)}"


def _too_long(value: str, limit: int) -> str:
    return f"is {len(value)} characters long; at most {limit}"


def _human(n: int) -> str:
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    if n >= KiB:
        return f"{n / KiB:.1f} KiB"
    return f"{n} bytes"
