"""/api/v1/secrets on a real local server (the local token): status codes, shapes, bodies
refused without being echoed or parsed deeply, and the CLI's client over the same routes.
Roles and workspaces on a shared server: test_secret_workspaces.py."""

from __future__ import annotations

import getpass
import http.client
import json
import socket
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tauproc import Tau

from leftovers import kill_leftover_supervisors
from taugrid.cli.client import Client
from taugrid.errors import NotFound, UsageError

VALUE = "hf_route-secret-value-xyz"


class Http:
    """Raw requests, so the tests control every byte of the body."""

    def __init__(self, url: str, token: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.auth = {"Authorization": f"Bearer {token}"}

    def __call__(
        self,
        method: str,
        url: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
    ) -> tuple[int, bytes]:
        hdrs = {**(self.auth if auth else {}), **(headers or {})}
        if json_body is not None:
            content = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
        try:
            conn.request(method, url, body=content, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tau]:
    root = tmp_path_factory.mktemp("secret-api")
    (root / "work").mkdir()
    tau = Tau(home=root / "home", cwd=root / "work")
    tau.start_server()
    try:
        yield tau
    finally:
        tau.stop_server()
        kill_leftover_supervisors(tau.home)


@pytest.fixture
def api(server: Tau) -> Iterator[Http]:
    http_ = Http(server.server_info()["url"], server.token())
    yield http_
    _, body = http_("GET", "/api/v1/secrets")
    for s in json.loads(body)["secrets"]:
        http_("DELETE", f"/api/v1/secrets/{urllib.parse.quote(s['ref'], safe='')}")


def error_of(body: bytes) -> dict[str, Any]:
    err: dict[str, Any] = json.loads(body)["error"]
    return err


def test_put_list_delete(api: Http, server: Tau) -> None:
    assert api("PUT", "/api/v1/secrets/hf%2Ftoken", json_body={"value": VALUE}) == (204, b"")
    assert (server.home / "secrets" / "default" / "hf@token").read_text() == VALUE
    assert api("PUT", "/api/v1/secrets/wandb", json_body={"value": "w"})[0] == 204
    status, body = api("GET", "/api/v1/secrets")
    assert status == 200
    listed = json.loads(body)
    assert listed["workspace"] == "default"
    assert [s["ref"] for s in listed["secrets"]] == ["hf/token", "wandb"]
    assert set(listed["secrets"][0]) == {"ref", "scope", "owner", "updated_at"}
    assert listed["secrets"][0]["scope"] == "workspace" and listed["secrets"][0]["owner"] is None
    assert VALUE.encode() not in body
    assert api("DELETE", "/api/v1/secrets/hf%2Ftoken")[0] == 204
    status, body = api("DELETE", "/api/v1/secrets/hf%2Ftoken")
    assert status == 404
    assert error_of(body) == {
        "code": "not_found",
        "message": "secret 'hf/token' is not set in workspace 'default'",
    }
    # An unencoded slash reaches the same kind of secret; the old paths mean `default`.
    assert api("DELETE", "/api/v1/secrets/wandb")[0] == 204
    assert json.loads(api("GET", "/api/v1/secrets?workspace=default")[1])["secrets"] == []


def test_every_route_needs_the_token(api: Http, server: Tau) -> None:
    assert api("PUT", "/api/v1/secrets/k", json_body={"value": VALUE})[0] == 204
    routes = [("PUT", "/api/v1/secrets/k"), ("GET", "/api/v1/secrets")]
    for method, url in [*routes, ("DELETE", "/api/v1/secrets/k")]:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            status, _ = api(method, url, json_body={"value": "x"}, headers=headers, auth=False)
            assert status == 401, (method, headers)
    assert (server.home / "secrets" / "default" / "k").read_text() == VALUE


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(VALUE),  # a bare string
        json.dumps({"value": VALUE, "extra": 1}),
        json.dumps({"valu": VALUE}),
        f'{{"value": "{VALUE}", "value": "x"}}',  # which value? neither
        json.dumps([VALUE]),
        "not json " + VALUE,
        json.dumps({"value": 12345}),
        json.dumps({"value": ""}),
        json.dumps({"value": VALUE + "\0"}),
        json.dumps({"value": VALUE * 3000}),  # > 64 KiB
        json.dumps({"value": [[[VALUE]]]}),
        '{"value": "' + VALUE,  # unterminated
        "[" * 50 + json.dumps(VALUE) + "]" * 50,  # depth 50: once a 500
        "[" * 100_000 + "]" * 100_000,  # deeper than any parser's recursion
        '{"value": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"value": {"value": {"value": "' + VALUE + '"}}}',
    ],
    ids=lambda body: f"{len(body)}-bytes-{body[:12]}",
)
def test_bad_bodies_are_refused_without_echoing_them(api: Http, server: Tau, body: str) -> None:
    status, answer = api(
        "PUT",
        "/api/v1/secrets/k",
        content=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    assert status == 400, answer[:300]
    assert error_of(answer)["code"] == "usage"
    assert VALUE.encode() not in answer and b"12345" not in answer
    assert json.loads(api("GET", "/api/v1/secrets")[1])["secrets"] == []


def test_a_huge_body_is_refused_before_it_is_read(api: Http) -> None:
    """Content-Length over the limit: the answer comes while the body is still unsent."""
    with socket.create_connection((api.host, api.port), timeout=10) as sock:
        head = (
            "PUT /api/v1/secrets/k HTTP/1.1\r\n"
            f"Host: {api.host}\r\nAuthorization: {api.auth['Authorization']}\r\n"
            "Content-Length: 1000000000\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"value": "' + b"x" * 1000)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)  # the whole answer, while 999,999,000 bytes are unsent
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"code":"request_too_large"' in answer.replace(b" ", b"")
    assert b"a secret value is at most 64 KiB" in answer


def test_a_body_over_the_limit_is_refused_whole(api: Http) -> None:
    body = b'{"value": "' + b"x" * 600_000 + b'"}'
    status, answer = api(
        "PUT", "/api/v1/secrets/k", content=body, headers={"Content-Type": "application/json"}
    )
    assert (status, error_of(answer)["code"]) == (413, "request_too_large")
    assert b"xxxxxxxx" not in answer


@pytest.mark.parametrize("ref", ["a%2F%2Fb", "..%2Fescape", "a%20b", "a%3Db", "~users"])
def test_bad_refs_are_usage_errors_without_echo(api: Http, ref: str) -> None:
    status, body = api("PUT", f"/api/v1/secrets/{ref}", json_body={"value": VALUE})
    assert status == 400
    assert error_of(body)["message"].startswith("invalid secret reference")
    assert VALUE.encode() not in body and urllib.parse.unquote(ref).encode() not in body


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("workspace=Bad%20Name", "invalid workspace name"),
        ("workspace=..", "invalid workspace name"),
        ("scope=everyone", "scope must be 'workspace' or 'personal'"),
    ],
)
def test_bad_workspace_or_scope(api: Http, query: str, message: str) -> None:
    for method in ("PUT", "DELETE"):
        status, body = api(method, f"/api/v1/secrets/k?{query}", json_body={"value": VALUE})
        assert (status, error_of(body)["message"].split(":")[0]) == (400, message.split(":")[0])
        assert b"Bad Name" not in body and b"everyone" not in body


def test_unknown_workspace_is_not_found_even_for_the_local_admin(api: Http) -> None:
    status, body = api("PUT", "/api/v1/secrets/k?workspace=nowhere", json_body={"value": VALUE})
    assert (status, error_of(body)["code"]) == (404, "not_found")
    assert api("GET", "/api/v1/secrets?workspace=nowhere")[0] == 404


def test_personal_scope_for_the_local_user(api: Http, server: Tau) -> None:
    assert api("PUT", "/api/v1/secrets/k?scope=personal", json_body={"value": "mine"})[0] == 204
    assert api("PUT", "/api/v1/secrets/k", json_body={"value": "shared"})[0] == 204
    listed = json.loads(api("GET", "/api/v1/secrets")[1])["secrets"]
    assert [(s["ref"], s["scope"]) for s in listed] == [("k", "personal"), ("k", "workspace")]
    assert listed[0]["owner"] == getpass.getuser() and listed[1]["owner"] is None
    users = server.home / "secrets" / "default" / "~users"
    assert [p.name for p in users.iterdir()] and (users / listed[0]["owner"] / "k").exists()
    assert api("DELETE", "/api/v1/secrets/k?scope=personal")[0] == 204
    assert api("DELETE", "/api/v1/secrets/k?scope=personal")[0] == 404


def test_openapi_documents_the_routes_without_values(api: Http) -> None:
    spec = json.loads(api("GET", "/api/v1/openapi.json")[1])
    put = spec["paths"]["/api/v1/secrets/{ref}"]["put"]
    assert put["requestBody"]["content"]["application/json"]["schema"]["required"] == ["value"]
    assert {p["name"] for p in put["parameters"]} >= {"ref", "workspace", "scope"}
    assert "get" in spec["paths"]["/api/v1/secrets"]


def test_the_cli_client_speaks_these_routes(api: Http, server: Tau) -> None:
    """The stdlib client of the CLI: '/' in refs survives the round trip."""
    client = Client(server.server_info()["url"], server.token())
    client.put_secret("hf/token", VALUE)
    client.put_secret("a.b/c-d_e", "2", workspace="default")
    client.put_secret("mine", "3", personal=True)
    store = server.home / "secrets" / "default"
    assert (store / "hf@token").read_text() == VALUE
    listed = client.list_secrets(workspace="default")
    assert [(s["ref"], s["scope"]) for s in listed["secrets"]] == [
        ("a.b/c-d_e", "workspace"),
        ("hf/token", "workspace"),
        ("mine", "personal"),
    ]
    client.delete_secret("hf/token")
    client.delete_secret("mine", personal=True)
    with pytest.raises(NotFound, match="secret 'hf/token' is not set"):
        client.delete_secret("hf/token")
    with pytest.raises(UsageError, match="invalid secret reference"):
        client.put_secret("../x", VALUE)


def test_audit_records_every_change_without_the_value(api: Http, server: Tau) -> None:
    api("PUT", "/api/v1/secrets/audited", json_body={"value": VALUE})
    api("DELETE", "/api/v1/secrets/audited")
    api("PUT", "/api/v1/secrets/..%2Fx", json_body={"value": VALUE})
    status, body = api("GET", "/api/v1/admin/audit?limit=50")
    assert status == 200
    assert VALUE.encode() not in body
    entries = [e for e in json.loads(body)["entries"] if e["action"].startswith("secret.")]
    mine = [(e["action"], e["target"], e["workspace"], e["outcome"]) for e in entries[:3]]
    assert mine == [
        ("secret.set", None, "default", "usage"),  # the bad ref is not recorded
        ("secret.delete", "audited", "default", "ok"),
        ("secret.set", "audited", "default", "ok"),
    ]


def test_the_store_holds_the_value_in_one_place(server: Tau, api: Http, tmp_path: Path) -> None:
    api("PUT", "/api/v1/secrets/only-here", json_body={"value": VALUE + "-unique"})
    holders = [
        p
        for p in server.home.rglob("*")
        if p.is_file() and (VALUE + "-unique").encode() in p.read_bytes()
    ]
    assert holders == [server.home / "secrets" / "default" / "only-here"]
