"""YAML syntax errors in TauGrid's words. Pure.

The parser says "mapping values are not allowed here" or "expected <block end>, but found
'<block sequence start>'": true, but it names the parser's state, not the mistake. A
tau.yaml author needs the likely mistake and the fix. :func:`explain` maps the parser's
problem and context to that, and says which of the parser's two marks to point at: for an
unclosed quote or bracket the useful place is where it was opened, not the end of the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Explained:
    message: str
    at_context: bool = False  # point at the context mark (where the construct began)


_CANNOT_START = re.compile(r"found character '(.+)' that cannot start any token")
_UNDEFINED_ALIAS = re.compile(r"found undefined alias '(.+)'")


def explain(problem: str | None, context: str | None) -> Explained:
    """The message for a parser error (``problem`` and ``context`` as ruamel gives them)."""
    p, c = problem or "", context or ""
    if "quoted scalar" in c and "end of stream" in p:
        return Explained("this quoted string is never closed: add the closing quote", True)
    if "expected ',' or ']'" in p:
        return Explained("this [ list is not closed: add ']' (or a ',' between items)", True)
    if "expected ',' or '}'" in p:
        return Explained("this { mapping is not closed: add '}' (or a ',' between entries)", True)
    if "mapping values are not allowed" in p:
        return Explained(
            "unexpected ':': quote a value that contains ': ', or check this line's "
            "indentation (it may be indented under a value)"
        )
    if (m := _CANNOT_START.search(p)) is not None:
        char = m.group(1)
        if char == "\\t":
            return Explained("a tab character: YAML indents with spaces only")
        return Explained(f"a value cannot start with {char!r}: put the value in quotes")
    if (m := _UNDEFINED_ALIAS.search(p)) is not None:
        return Explained(f"*{m.group(1)} refers to no anchor &{m.group(1)} above it")
    if "expected <block end>" in p or "did not find expected key" in p:
        return Explained(
            "this line does not line up with the lines above it: indent it like its "
            "siblings (or, after a closing quote, nothing may follow on the line)"
        )
    if "did not find expected '-' indicator" in p:
        return Explained("a list item here needs '- ' at the same indentation as the others")
    if "could not find expected ':'" in p:
        return Explained("expected 'key: value' here: a ':' is missing or a quote is not closed")
    if "another document" in p:
        return Explained("a second YAML document ('---'): tau.yaml holds one")
    if "duplicate anchor" in p:
        return Explained(f"{p}: each &anchor may be defined once")
    return Explained(f"not valid YAML here ({p or c or 'the parser gave no reason'})")
