"""The portal's templates and static files: every template compiles, output is escaped,
states are told in words, the vendored scripts are the pinned ones."""

from __future__ import annotations

import hashlib

import pytest

from taugrid.domain.states import RunState
from taugrid.server.portal.web import (
    CSP,
    STATE_MARKS,
    STATIC_DIR,
    TEMPLATES,
    ago,
    duration,
    number,
)

VENDORED = {
    "htmx-2.0.11.min.js": "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717",
    "htmx-ext-sse-2.2.4.min.js": "98a46496de0c3605fbffdce9167ba427bdd9553184f83f149c261891a92c0136",
}


def test_every_template_compiles() -> None:
    names = TEMPLATES.list_templates()
    assert "run.html" in names and "runs.html" in names
    for name in names:
        TEMPLATES.get_template(name)


@pytest.mark.parametrize(("name", "digest"), sorted(VENDORED.items()))
def test_the_vendored_scripts_are_the_pinned_releases_with_their_licences(
    name: str, digest: str
) -> None:
    path = STATIC_DIR / "vendor" / name
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    licence = "htmx-ext-sse-LICENSE" if "sse" in name else "htmx-LICENSE"
    assert "Permission to use, copy, modify" in (STATIC_DIR / "vendor" / licence).read_text()


def test_the_policy_allows_no_inline_script_or_style() -> None:
    directives = dict(d.strip().split(" ", 1) for d in CSP.split(";"))
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["default-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    # Nothing the portal serves relies on an inline script or style attribute.
    for name in TEMPLATES.list_templates():
        source = (STATIC_DIR.parent / "templates" / name).read_text()
        assert "<script>" not in source and " style=" not in source and "onclick" not in source


def test_every_state_has_a_symbol_beside_its_word() -> None:
    assert set(STATE_MARKS) == {s.value for s in RunState}
    html = TEMPLATES.from_string('{% import "_macros.html" as m %}{{ m.state("FAILED") }}').render(
        state_marks=STATE_MARKS
    )
    assert "FAILED" in html and "✗" in html


def test_user_text_is_escaped() -> None:
    html = TEMPLATES.get_template("error.html").render(
        error={"code": "usage", "message": "<script>alert(1)</script>"},
        status=400,
        caller=None,
        nav="",
    )
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


def test_times_read_as_people_say_them() -> None:
    assert ago(None) == "—"
    assert ago(100.0, now=130.0) == "30 s ago"
    assert ago(0.0, now=7200.0) == "2.0 h ago"
    assert duration(0.0, 90.0) == "90.0 s"
    assert duration(None, None) == "—"


def test_metric_values_read_to_four_digits() -> None:
    assert number(0.07692307692307693) == "0.07692"
    assert number(12345678) == "1.235e+07"
    assert number(None) == "—"
    assert number(3) == "3"
