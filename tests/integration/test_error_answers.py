"""The API's error answers, against a real local server: the documented JSON shape for
every 4xx and 500, never a part of the request in them, and bounded JSON bodies."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import patched_server
import pytest
from tauproc import Tau

MARK = "s3cr3t-VALUE-7f1c"  # what a careless client might send in the wrong field
DEEP = "[" * 10_000 + "]" * 10_000
JUST_TOO_DEEP = "[" * 65 + "]" * 65  # parses fine; one level over the bound
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def api(tau: Tau) -> Iterator[httpx.Client]:
    info = tau.start_server("--gpus", "0")
    with httpx.Client(
        base_url=f"{info['url']}/api/v1",
        headers={"Authorization": f"Bearer {tau.token()}"},
        timeout=30,
    ) as client:
        yield client


def _error(resp: httpx.Response, status: int | tuple[int, ...]) -> dict[str, Any]:
    """The documented error body, and its ``error`` object."""
    wanted = (status,) if isinstance(status, int) else status
    assert resp.status_code in wanted, (resp.status_code, resp.text[:300])
    assert resp.headers["content-type"].startswith("application/json"), resp.text[:300]
    body = resp.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["code"], str) and isinstance(body["error"]["message"], str)
    error: dict[str, Any] = body["error"]
    return error


def test_validation_answers_never_echo_the_request(api: httpx.Client) -> None:
    bad_submit = {
        "spec_source": ["not", "a", "string", MARK],
        "resolved": MARK,
        "snapshot_digest": MARK,
        "spec_hash": {"x": MARK},
        "env": {"HF_TOKEN": [MARK]},
        "overrides": MARK,
    }
    resp = api.post("/runs", json=bad_submit, headers={"Idempotency-Key": "k1"})
    err = _error(resp, 422)
    assert MARK not in resp.text
    assert err["code"] == "spec_invalid"
    fields = {p["field"] for p in err["problems"]}
    assert {"resolved", "snapshot_digest", "env.HF_TOKEN"} <= fields, fields
    assert all(set(p) == {"file", "line", "col", "field", "message"} for p in err["problems"])

    # A value that fails the spec's own validators (they quote values for tau.yaml files).
    named = {
        "spec_source": "tau.yaml",
        "resolved": {"name": f"Bad_{MARK}", "command": "echo", "workspace": "default"},
        "snapshot_digest": "0" * 64,
    }
    resp = api.post("/runs", json=named, headers={"Idempotency-Key": "k2"})
    err = _error(resp, 422)
    assert MARK not in resp.text and "name" in {p["field"] for p in err["problems"]}

    for resp in (
        api.post("/runs/batch", json={"runs": [{**bad_submit, "idempotency_key": MARK}]}),
        api.post("/runs/cancel", json={"runs": [{"ref": MARK}]}),
        api.put("/admin/policy", json={"source": "p.yaml", "text": {"inline": MARK}}),
        api.get("/runs", params={"limit": MARK}),
        api.get("/admin/audit", params={"since": MARK}),
    ):
        assert _error(resp, 422)["code"] == "spec_invalid"
        assert MARK not in resp.text, resp.text

    # Not JSON at all: a usage error that says so, still without the text.
    resp = api.post("/runs/cancel", content=f'{{"runs": ["{MARK}"', headers=JSON)
    assert _error(resp, 400)["code"] == "usage" and MARK not in resp.text
    # Unknown paths and methods answer in the same shape.
    assert _error(api.get(f"/nothing/{MARK}"), 404)["code"] == "not_found"
    assert _error(api.delete("/runs/cancel"), 405)["code"] == "usage"


def test_deeply_nested_json_gets_a_4xx_json_error_everywhere(tau: Tau, api: httpx.Client) -> None:
    targets = [
        ("POST", "/runs"),
        ("POST", "/runs/batch"),
        ("PUT", "/admin/policy"),
        ("POST", "/runs/cancel"),
        ("PUT", "/secrets/x"),
        ("POST", "/admin/workspaces"),
        ("POST", "/internal/attempt-status"),
        ("POST", "/auth/device/token"),  # the OIDC routes, which need no token
    ]
    for body in (DEEP, JUST_TOO_DEEP, f'{{"runs": {DEEP}}}', f'{{"text": {JUST_TOO_DEEP}}}'):
        for method, path in targets:
            resp = api.request(method, path, content=body, headers=JSON)
            err = _error(resp, (400, 404, 422))
            if resp.status_code != 404:  # 404: OIDC is not configured, nothing was read
                assert "nested" in err["message"] or "JSON" in err["message"], (path, err)
            assert "[[" not in resp.text
    assert tau.json("list")["runs"] == []  # nothing was created
    assert api.get("/queues").status_code == 200  # and the server is fine


def test_json_bodies_over_the_size_limit_are_refused(api: httpx.Client) -> None:
    # A declared length over the limit: refused before a byte of the body is read.
    url = httpx.URL(str(api.base_url))
    with socket.create_connection((url.host, url.port), timeout=30) as sock:
        sock.sendall(
            b"POST /api/v1/runs/cancel HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 70000000\r\n\r\n"
        )
        answer = sock.makefile("rb").read()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert json.loads(body)["error"]["code"] == "request_too_large"

    # A chunked body (no length) is cut off once it passes the limit.
    def chunks() -> Iterator[bytes]:
        yield b'{"runs": ["'
        for _ in range(65):
            yield b"x" * (1 << 20)
        yield b'"]}'

    start = time.monotonic()
    resp = api.post("/runs/cancel", content=chunks(), headers=JSON)
    assert _error(resp, 413)["code"] == "request_too_large"
    assert time.monotonic() - start < 20
    assert api.get("/queues").status_code == 200


def test_an_unexpected_failure_is_a_json_500_and_logged(tmp_path: Path) -> None:
    # No request can make a route fail unexpectedly on purpose (that would be a bug to
    # fix): the real server runs with one route's helper raising, as a bug would.
    prelude = (
        "import taugrid.server.views as r\n"
        "def broken(svc):\n"
        f"    raise RuntimeError('exploded while holding {MARK}')\n"
        "r.queue_report = broken\n"
    )
    home, log = tmp_path / "home", tmp_path / "server.log"
    with patched_server.running(home, prelude, "--gpus", "0", log=log) as url:
        hdr = {"Authorization": f"Bearer {(home / 'token').read_text().strip()}"}
        resp = httpx.get(f"{url}/api/v1/queues", headers=hdr, timeout=30)
        err = _error(resp, 500)
        assert err["code"] == "internal"
        assert MARK not in resp.text and "Traceback" not in resp.text
        ref = err["message"].split("reference ")[1].split(";")[0]
        assert httpx.get(f"{url}/api/v1/runs", headers=hdr, timeout=30).status_code == 200
    text = log.read_text()
    assert f"internal error {ref} in GET /api/v1/queues" in text
    after = text.split(f"internal error {ref}")[1]
    assert "Traceback" in after and MARK in after  # the details are in the log only
    assert text.count("Traceback") == 1  # logged once
