"""The body parser of PUT /api/v1/secrets: what it accepts, and that it refuses everything
else without echoing it or recursing into it. The routes themselves, on a real server:
tests/integration/test_secret_api.py (local token) and test_secret_workspaces.py (roles)."""

from __future__ import annotations

import json
import time

import pytest

from taugrid.domain.secret_refs import MAX_VALUE_BYTES
from taugrid.errors import RequestTooLarge, UsageError
from taugrid.server.secret_routes import MAX_BODY_BYTES, value_from

VALUE = "hf_route-secret-value-xyz"


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"value": VALUE}),
        ' \n{ "value" :\t"' + VALUE + '" }\r\n',
        json.dumps({"value": VALUE + ' with "quotes", [brackets] and {braces}'}),
        json.dumps({"value": "päss wörd\nline2"}),
        json.dumps({"value": "é" * (MAX_VALUE_BYTES // 2)}, ensure_ascii=True),  # \u escapes
        '{"\\u0076alue": "' + VALUE + '"}',  # an escaped key is still "value"
    ],
    ids=["plain", "spaces", "json-in-value", "unicode", "escaped-max", "escaped-key"],
)
def test_accepted(body: str) -> None:
    assert value_from(body.encode()) == json.loads(body)["value"]


BAD = {
    "bare-string": json.dumps(VALUE),
    "extra-key": json.dumps({"value": VALUE, "extra": 1}),
    "wrong-key": json.dumps({"valu": VALUE}),
    "two-values": f'{{"value": "{VALUE}", "value": "x"}}',
    "list": json.dumps([VALUE]),
    "not-json": "not json " + VALUE,
    "number": json.dumps({"value": 12345}),
    "empty-value": json.dumps({"value": ""}),
    "nul": json.dumps({"value": VALUE + "\0"}),
    "too-big": json.dumps({"value": VALUE * 3000}),
    "nested-value": json.dumps({"value": [[[VALUE]]]}),
    "unterminated": '{"value": "' + VALUE,
    "depth-50": "[" * 50 + json.dumps(VALUE) + "]" * 50,
    "depth-100k": "[" * 100_000 + "]" * 100_000,
    "object-depth-100k": '{"value": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "vertical-tab": '{"value":\v"' + VALUE + '"}',
    "empty": "",
}


@pytest.mark.parametrize("name", list(BAD))
def test_refused_without_echo(name: str) -> None:
    with pytest.raises(UsageError) as err:
        value_from(BAD[name].encode())
    assert VALUE not in err.value.message and "12345" not in err.value.message


def test_over_the_body_limit_is_refused() -> None:
    body = b'{"value": "' + b"x" * MAX_BODY_BYTES + b'"}'
    with pytest.raises(RequestTooLarge, match="a secret value is at most 64 KiB"):
        value_from(body)


def test_worst_case_bodies_are_cheap() -> None:
    """At the size limit, the shape check is linear (no backtracking, no recursion)."""
    worst = [
        b"[" * MAX_BODY_BYTES,
        b'"' + b"\\\\" * (MAX_BODY_BYTES // 2 - 1),
        b'{"value": "' + b"\\u00e9" * ((MAX_BODY_BYTES - 14) // 6) + b'"}',
    ]
    for body in worst:
        started = time.perf_counter()
        with pytest.raises((UsageError, RequestTooLarge)):
            value_from(body)
        assert time.perf_counter() - started < 0.5
