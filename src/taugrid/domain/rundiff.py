"""What differs between two run records (``tau diff``). Pure: two run details in, data out.

:func:`diff_runs` gives the stable ``-o json`` shape (docs/api.md); :func:`render` the text.
A *change* is ``{"key", "change": "added"|"removed"|"changed", "a", "b"}``: ``added``
means only run B has the key (``a`` is null), ``removed`` only run A (``b`` is null).
The files of the two code snapshots (``GET /runs/{ref}/snapshot``: path, size, sha256)
compare the same way, by path and content: :func:`compare_files`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from taugrid.domain.workload_env import submitter_env

Change = dict[str, Any]
FileChange = dict[str, Any]  # {"path", "change", "a_size", "b_size"}
_SHOWN_MAX = 80
_FILES_SHOWN = 50  # the text lists this many changed files; -o json has them all


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``{"dotted.key": leaf}``; lists and scalars are leaves, and an
    empty mapping has no leaves."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, child in value.items():
            out.update(flatten(child, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def compare(a: Mapping[str, Any], b: Mapping[str, Any], *, sort: bool = False) -> list[Change]:
    """Changes from flat mapping ``a`` to flat mapping ``b``, in ``a``'s key order then
    ``b``'s (or sorted). A key with a null value that only one side has is no change, and
    a null where the other side has keys below it (``experiment: null`` against
    ``experiment.name``) is no key."""
    a, b = _drop_null_parents(a, b), _drop_null_parents(b, a)
    keys = list(dict.fromkeys([*a, *b]))
    if sort:
        keys.sort()
    changes: list[Change] = []
    for key in keys:
        # A null that appears or disappears with its key says nothing: not a change.
        if key not in b:
            if a[key] is not None:
                changes.append({"key": key, "change": "removed", "a": a[key], "b": None})
        elif key not in a:
            if b[key] is not None:
                changes.append({"key": key, "change": "added", "a": None, "b": b[key]})
        elif a[key] != b[key] or type(a[key]) is not type(b[key]):
            changes.append({"key": key, "change": "changed", "a": a[key], "b": b[key]})
    return changes


def _drop_null_parents(side: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in side.items()
        if not (v is None and k not in other and any(o.startswith(k + ".") for o in other))
    }


def compare_files(
    a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]
) -> list[FileChange]:
    """Files added, removed or changed (other content, size or kind) from snapshot A's
    listing to B's, in path order."""
    by_a = {str(m["path"]): m for m in a}
    by_b = {str(m["path"]): m for m in b}
    out: list[FileChange] = []
    for path in sorted(by_a.keys() | by_b.keys()):
        fa, fb = by_a.get(path), by_b.get(path)
        if fa is not None and fb is not None:
            if (fa["sha256"], fa.get("type")) == (fb["sha256"], fb.get("type")):
                continue
            change = "changed"
        else:
            change = "added" if fa is None else "removed"
        out.append(
            {
                "path": path,
                "change": change,
                "a_size": None if fa is None else fa["size"],
                "b_size": None if fb is None else fb["size"],
            }
        )
    return out


def diff_runs(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    files_a: Sequence[Mapping[str, Any]] | None = None,
    files_b: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Compare two run details (``GET /runs/{ref}``), and their snapshots' files when both
    listings are given (``code.files``; null when the snapshots differ and no listing was
    had, ``[]`` when they are the same snapshot)."""
    spec_a, spec_b = a["spec"], b["spec"]
    spec = compare(flatten(spec_a["resolved"]), flatten(spec_b["resolved"]))

    git_a, git_b = _git(a), _git(b)
    git = compare(
        flatten({"git": _without(git_a, "diff")}), flatten({"git": _without(git_b, "diff")})
    )
    text_a = (git_a or {}).get("diff") or None
    text_b = (git_b or {}).get("diff") or None
    unified = None
    if text_a is not None and text_b is not None and text_a != text_b:
        unified = unified_diff(text_a, text_b, f"{a['id']} git diff", f"{b['id']} git diff")
    same_snapshot = spec_a["snapshot_digest"] == spec_b["snapshot_digest"]
    files: list[FileChange] | None = []
    if not same_snapshot:
        files = None if files_a is None or files_b is None else compare_files(files_a, files_b)
    code: dict[str, Any] = {
        "snapshot": {
            "a": spec_a["snapshot_digest"],
            "b": spec_b["snapshot_digest"],
            "same": same_snapshot,
        },
        "files": files,
        "git": git,
        "diff": {
            "a_lines": _lines(text_a),
            "b_lines": _lines(text_b),
            "same": text_a == text_b,
            "unified": unified,
        },
    }

    py_a, py_b = a.get("python_env") or {}, b.get("python_env") or {}
    environment = {
        "python": compare(
            flatten({"python": _without(py_a, "packages")}),
            flatten({"python": _without(py_b, "packages")}),
        ),
        "packages": compare(py_a.get("packages") or {}, py_b.get("packages") or {}, sort=True),
        # The server stores only allow-listed names; filter again, never show more.
        "env": compare(
            submitter_env(a.get("env") or {}), submitter_env(b.get("env") or {}), sort=True
        ),
    }

    over_a, over_b = list(spec_a.get("overrides") or []), list(spec_b.get("overrides") or [])
    overrides = {
        "a": over_a,
        "b": over_b,
        "only_a": [o for o in over_a if o not in over_b],
        "only_b": [o for o in over_b if o not in over_a],
        "same": over_a == over_b,
    }
    identical = (
        not spec
        and code["snapshot"]["same"]
        and not git
        and code["diff"]["same"]
        and not any(environment.values())
        and overrides["same"]
    )
    return {
        "a": a["id"],
        "b": b["id"],
        "identical": identical,
        "spec": spec,
        "code": code,
        "environment": environment,
        "overrides": overrides,
    }


def _git(run: Mapping[str, Any]) -> dict[str, Any] | None:
    code = run.get("code") or {}
    git = code.get("git")
    return dict(git) if git else None


def _without(data: Mapping[str, Any] | None, key: str) -> dict[str, Any] | None:
    return None if data is None else {k: v for k, v in data.items() if k != key}


def _lines(text: str | None) -> int | None:
    return None if text is None else len(text.splitlines())


def unified_diff(a: str, b: str, name_a: str, name_b: str) -> str:
    import difflib

    lines = difflib.unified_diff(
        a.splitlines(), b.splitlines(), fromfile=name_a, tofile=name_b, lineterm=""
    )
    return "\n".join(lines) + "\n"


# -- text --------------------------------------------------------------------------------


def shown(value: Any, *, quote: bool = True) -> str:
    """A value in one short line: JSON (strings quoted, so "1" and 1 differ), cut at 80."""
    text = (
        json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        if quote or not isinstance(value, str)
        else value
    )
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 1] + "…"


def change_line(c: Change, *, quote: bool = True) -> str:
    if c["change"] == "added":
        return f"  + {c['key']}: {shown(c['b'], quote=quote)}"
    if c["change"] == "removed":
        return f"  - {c['key']}: {shown(c['a'], quote=quote)}"
    return f"  ~ {c['key']}: {shown(c['a'], quote=quote)} -> {shown(c['b'], quote=quote)}"


def render(d: Mapping[str, Any]) -> str:
    """The text of ``tau diff``: only the sections that differ, or "no differences"."""
    if d["identical"]:
        return "no differences"
    lines = [f"A: {d['a']}", f"B: {d['b']}"]
    if d["spec"]:
        lines += ["", f"Spec ({len(d['spec'])} difference(s)):"]
        lines += [change_line(c) for c in d["spec"]]

    code = d["code"]
    if not code["snapshot"]["same"] or code["git"] or not code["diff"]["same"]:
        lines += ["", "Code:"]
        snap = code["snapshot"]
        if snap["same"]:
            lines.append(f"  snapshot: same ({snap['a'][:12]})")
        else:
            lines.append(f"  snapshot: different ({snap['a'][:12]} -> {snap['b'][:12]})")
            lines += _file_lines(code.get("files"))
        lines += [change_line(c) for c in code["git"]]
        diff = code["diff"]
        if diff["unified"]:
            lines.append(
                f"  uncommitted changes differ (A {diff['a_lines']} lines of diff, "
                f"B {diff['b_lines']}):"
            )
            lines += ["    " + line for line in diff["unified"].splitlines()]
        elif not diff["same"]:
            which, n = ("A", diff["a_lines"]) if diff["a_lines"] else ("B", diff["b_lines"])
            lines.append(f"  uncommitted changes: only {which} has them ({n} lines of diff)")

    env = d["environment"]
    if any(env.values()):
        lines += ["", "Environment:"]
        lines += [change_line(c) for c in env["python"]]
        if env["packages"]:
            counts = {k: sum(c["change"] == k for c in env["packages"]) for k in _KINDS}
            lines.append(
                "  packages: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n) + ":"
            )
            lines += ["  " + change_line(c, quote=False) for c in env["packages"]]
        lines += [change_line(c) for c in (dict(c, key=f"env.{c['key']}") for c in env["env"])]

    over = d["overrides"]
    if not over["same"]:
        lines += [
            "",
            "Overrides:",
            "  A: " + (shlex.join(over["a"]) or "(none)"),
            "  B: " + (shlex.join(over["b"]) or "(none)"),
        ]
    return "\n".join(lines)


_KINDS = ("changed", "added", "removed")
_MARKS = {"changed": "~", "added": "+", "removed": "-"}


def _file_lines(files: Sequence[Mapping[str, Any]] | None) -> list[str]:
    if files is None:
        return ["  files: not compared (the server did not list a snapshot)"]
    if not files:  # other archives of the same files (another git record, say)
        return ["  files: the same in both"]
    counts = {k: sum(f["change"] == k for f in files) for k in _KINDS}
    lines = ["  files: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n) + ":"]
    for f in files[:_FILES_SHOWN]:
        if f["change"] == "changed":
            sizes = f"{_size(f['a_size'])} -> {_size(f['b_size'])}"
        else:
            sizes = _size(f["b_size"] if f["change"] == "added" else f["a_size"])
        path = str(f["path"])  # quoted when it holds what a terminal would act on
        lines.append(
            f"    {_MARKS[f['change']]} {shown(path, quote=not path.isprintable())} ({sizes})"
        )
    if len(files) > _FILES_SHOWN:
        lines.append(f"    ... and {len(files) - _FILES_SHOWN} more (tau diff -o json lists all)")
    return lines


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
