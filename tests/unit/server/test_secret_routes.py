"""/api/v1/secrets on a bare app: status codes, shapes, and no value in any answer."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from taugrid.cli.client import Client
from taugrid.errors import NotFound, TauError, UsageError
from taugrid.executors.local.secrets import LocalSecretStore
from taugrid.server.secret_routes import router

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
VALUE = "hf_route-secret-value-xyz"


def make_app(store: LocalSecretStore) -> FastAPI:
    app = FastAPI()

    @app.exception_handler(TauError)
    async def tau_error(_request: Request, exc: TauError) -> JSONResponse:
        return JSONResponse({"error": exc.to_dict()}, status_code=exc.http_status)

    app.include_router(router)
    app.state.token = TOKEN
    app.state.secrets = store
    return app


@dataclass
class Answer:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode()

    def json(self) -> Any:
        return json.loads(self.content)


class Http:
    """A few requests to a real uvicorn (the TestClient needs a package we do not use)."""

    def __init__(self, port: int) -> None:
        self.port = port

    def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        import json as json_mod

        hdrs = dict(headers or {})
        if json is not None:
            content = json_mod.dumps(json).encode()
            hdrs["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, url, body=content, headers=hdrs)
            resp = conn.getresponse()
            return Answer(resp.status, resp.read())
        finally:
            conn.close()

    def get(self, url: str, **kw: Any) -> Answer:
        return self.request("GET", url, **kw)

    def put(self, url: str, **kw: Any) -> Answer:
        return self.request("PUT", url, **kw)

    def delete(self, url: str, **kw: Any) -> Answer:
        return self.request("DELETE", url, **kw)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FastAPI, int]]:
    """One uvicorn for the module; each test gives it a fresh store."""
    app = make_app(LocalSecretStore(Path("/nonexistent")))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            thread.join(0.01)
            assert thread.is_alive(), "uvicorn did not start"
        yield app, server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def store(tmp_path: Path, served: tuple[FastAPI, int]) -> LocalSecretStore:
    store = LocalSecretStore(tmp_path / "secrets")
    served[0].state.secrets = store
    return store


@pytest.fixture
def port(store: LocalSecretStore, served: tuple[FastAPI, int]) -> int:
    return served[1]


@pytest.fixture
def http_(port: int) -> Http:
    return Http(port)


def test_put_list_delete(http_: Http, store: LocalSecretStore) -> None:
    r = http_.put("/api/v1/secrets/hf%2Ftoken", json={"value": VALUE}, headers=AUTH)
    assert (r.status_code, r.content) == (204, b"")
    assert store.path_of("hf/token").read_text() == VALUE
    r = http_.put("/api/v1/secrets/wandb", json={"value": "w"}, headers=AUTH)
    assert r.status_code == 204
    r = http_.get("/api/v1/secrets", headers=AUTH)
    assert r.status_code == 200
    body = r.json()
    assert [s["ref"] for s in body["secrets"]] == ["hf/token", "wandb"]
    assert set(body["secrets"][0]) == {"ref", "updated_at"}
    assert VALUE not in r.text
    r = http_.delete("/api/v1/secrets/hf%2Ftoken", headers=AUTH)
    assert r.status_code == 204
    r = http_.delete("/api/v1/secrets/hf%2Ftoken", headers=AUTH)
    assert r.status_code == 404
    assert r.json()["error"] == {"code": "not_found", "message": "secret 'hf/token' is not set"}
    # An unencoded slash reaches the same secret.
    assert http_.delete("/api/v1/secrets/wandb", headers=AUTH).status_code == 204
    assert http_.get("/api/v1/secrets", headers=AUTH).json() == {"secrets": []}


def test_every_route_needs_the_token(http_: Http, store: LocalSecretStore) -> None:
    store.set("k", VALUE)
    for method, url, kw in [
        ("PUT", "/api/v1/secrets/k", {"json": {"value": "x"}}),
        ("GET", "/api/v1/secrets", {}),
        ("DELETE", "/api/v1/secrets/k", {}),
    ]:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = http_.request(method, url, headers=headers, **kw)
            assert r.status_code == 401, (method, headers)
    assert store.path_of("k").read_text() == VALUE


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(VALUE),  # a bare string
        json.dumps({"value": VALUE, "extra": 1}),
        json.dumps({"valu": VALUE}),
        json.dumps([VALUE]),
        "not json " + VALUE,
        json.dumps({"value": 12345}),
        json.dumps({"value": ""}),
        json.dumps({"value": VALUE + "\0"}),
        json.dumps({"value": VALUE * 3000}),  # > 64 KiB
    ],
)
def test_bad_bodies_are_refused_without_echoing_them(
    http_: Http, store: LocalSecretStore, body: str
) -> None:
    r = http_.put(
        "/api/v1/secrets/k",
        content=body.encode(),
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "usage"
    assert VALUE not in r.text and "12345" not in r.text
    assert store.refs() == []


@pytest.mark.parametrize("ref", ["a%2F%2Fb", "..%2Fescape", "a%20b", "a%3Db"])
def test_bad_refs_are_usage_errors(http_: Http, ref: str) -> None:
    r = http_.put(f"/api/v1/secrets/{ref}", json={"value": VALUE}, headers=AUTH)
    assert r.status_code == 400
    assert "invalid secret reference" in r.json()["error"]["message"]
    assert VALUE not in r.text


def test_openapi_documents_the_routes_without_values(http_: Http) -> None:
    spec = http_.get("/openapi.json").json()
    put = spec["paths"]["/api/v1/secrets/{ref}"]["put"]
    assert put["requestBody"]["content"]["application/json"]["schema"]["required"] == ["value"]
    assert "get" in spec["paths"]["/api/v1/secrets"]


def test_the_cli_client_speaks_these_routes(store: LocalSecretStore, port: int) -> None:
    """The stdlib client of the CLI: '/' in refs survives the round trip."""
    client = Client(f"http://127.0.0.1:{port}", TOKEN)
    client.put_secret("hf/token", VALUE)
    client.put_secret("a.b/c-d_e", "2")
    assert store.path_of("hf/token").read_text() == VALUE
    listed = client.list_secrets()
    assert [s["ref"] for s in listed["secrets"]] == ["a.b/c-d_e", "hf/token"]
    client.delete_secret("hf/token")
    with pytest.raises(NotFound, match="secret 'hf/token' is not set"):
        client.delete_secret("hf/token")
    with pytest.raises(UsageError, match="invalid secret reference"):
        client.put_secret("../x", VALUE)
