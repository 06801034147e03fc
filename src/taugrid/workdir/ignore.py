"""The subset of gitignore semantics that code snapshots need.

Implemented here rather than with ``pathspec`` to keep the executor free of third-party
imports. Supported: comments, blank lines, ``\\``-escapes, trailing-space trimming, ``!``
negation, ``*``, ``?``, ``[...]`` classes, ``**`` (leading, middle, trailing), a trailing
``/`` (directories only) and a leading or middle ``/`` (anchored to the file's directory).

As in git, the last matching pattern wins, and a file inside an ignored directory cannot
be re-included (the walker never descends into an ignored directory).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class IgnorePattern:
    """One compiled pattern line, relative to ``base`` (a posix dir path, "" for the root).

    ``prefix`` serves ignore files *above* the root (a workdir inside a git repository):
    it is the root's path from that file's directory, put in front of every tested path.
    """

    source: str
    base: str
    negate: bool
    dir_only: bool
    regex: re.Pattern[str]
    prefix: str = ""

    def matches(self, rel: str, is_dir: bool) -> bool:
        """Whether this pattern matches the root-relative posix path ``rel``."""
        if self.dir_only and not is_dir:
            return False
        rel = self.prefix + rel
        if self.base:
            if not rel.startswith(self.base + "/"):
                return False
            rel = rel[len(self.base) + 1 :]
        return self.regex.fullmatch(rel) is not None


def _strip_trailing_spaces(line: str) -> str:
    # Trailing spaces are dropped unless the last one is escaped with a backslash.
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        if end >= 2 and line[end - 2] == "\\":
            break
        end -= 1
    return line[:end]


def _translate_class(pattern: str, start: int) -> tuple[str, int] | None:
    """Translate the ``[...]`` starting at ``start``; None when it never closes."""
    i = start + 1
    negate = i < len(pattern) and pattern[i] in "!^"
    if negate:
        i += 1
    body_start = i
    # A ']' right after the opening (or the negation) is a literal member.
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    if i >= len(pattern):
        return None
    body = pattern[body_start:i]
    out = []
    j = 0
    while j < len(body):
        ch = body[j]
        if ch == "\\" and j + 1 < len(body):
            out.append(re.escape(body[j + 1]))
            j += 2
            continue
        out.append(ch if ch == "-" else re.escape(ch))
        j += 1
    # A class never matches the path separator (wildmatch's WM_PATHNAME).
    return "(?!/)[" + ("^" if negate else "") + "".join(out) + "]", i + 1


def _translate(pattern: str) -> str:
    """Translate the glob part of a pattern (no anchor/dir markers) into a regex."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if pattern.startswith("**", i):
            after = pattern[i + 2 : i + 3]
            at_segment_start = i == 0 or pattern[i - 1] == "/"
            if at_segment_start and after == "/":
                out.append("(?:.*/)?")  # "**/": zero or more directories
                i += 3
                continue
            if at_segment_start and i + 2 == n:
                out.append(".*")  # trailing "/**": everything inside
                i += 2
                continue
            out.append("[^/]*")  # any other "**" is a plain "*"
            i += 2
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            translated = _translate_class(pattern, i)
            if translated is not None:
                out.append(translated[0])
                i = translated[1]
                continue
            out.append(re.escape(ch))
        elif ch == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def compile_pattern(line: str, base: str = "", prefix: str = "") -> IgnorePattern | None:
    """Compile one gitignore line; None for blank lines, comments and empty patterns."""
    line = line.rstrip("\r\n")
    if not line or line.startswith("#"):
        return None
    line = _strip_trailing_spaces(line)
    negate = line.startswith("!")
    if negate or line.startswith(("\\!", "\\#")):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    # A slash at the start or in the middle anchors the pattern to its directory; without
    # one the pattern matches a name at any depth.
    anchored = "/" in line
    line = line.lstrip("/")
    if not line:
        return None
    regex = _translate(line)
    if not anchored:
        regex = "(?:.*/)?" + regex
    return IgnorePattern(
        source=line,
        base=base.strip("/"),
        negate=negate,
        dir_only=dir_only,
        regex=re.compile(regex, re.DOTALL),
        prefix=prefix,
    )


def parse_patterns(lines: Iterable[str], base: str = "", prefix: str = "") -> list[IgnorePattern]:
    """Compile every meaningful line of a gitignore-style file."""
    compiled = (compile_pattern(line, base, prefix) for line in lines)
    return [p for p in compiled if p is not None]


def is_ignored(patterns: Sequence[IgnorePattern], rel: str, is_dir: bool) -> bool:
    """Apply ``patterns`` in order; the last one matching ``rel`` decides."""
    for pattern in reversed(patterns):
        if pattern.matches(rel, is_dir):
            return not pattern.negate
    return False
