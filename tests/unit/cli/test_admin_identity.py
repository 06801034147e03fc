"""``tau admin workspace|user|token|audit`` against a fake client, through the real main()."""

from __future__ import annotations

import copy
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from taugrid.cli.client import Client
from taugrid.cli.commands import admin_identity
from taugrid.cli.main import main
from taugrid.errors import Conflict, NotFound

SECRET = "tau_s3cr3t-value-0123456789"
T0 = 1_790_000_000.0

WORKSPACES = [
    {"name": "vision", "created_at": T0, "members": {"bob": "researcher", "alice": "maintainer"}},
    {"name": "empty", "created_at": T0 + 1, "members": {}},
]
USERS = [
    {
        "name": "alice",
        "kind": "user",
        "admin": True,
        "disabled": False,
        "created_at": T0,
        "memberships": {"vision": "maintainer"},
    },
    {
        "name": "ci-bot",
        "kind": "service",
        "admin": False,
        "disabled": True,
        "created_at": T0 + 5,
        "memberships": {},
    },
]
TOKENS = [
    {
        "id": "tok1",
        "user": "ci-bot",
        "name": "ci",
        "created_at": T0,
        "expires_at": None,
        "revoked_at": None,
        "last_used_at": T0 + 60,
    },
    {
        "id": "tok2",
        "user": "alice",
        "name": None,
        "created_at": T0,
        "expires_at": T0 + 10,  # long past
        "revoked_at": None,
        "last_used_at": None,
    },
    {
        "id": "tok3",
        "user": "alice",
        "name": "old",
        "created_at": T0,
        "expires_at": None,
        "revoked_at": T0 + 20,
        "last_used_at": None,
    },
]
ENTRIES = [
    {
        "id": 2,
        "at": T0 + 100,
        "actor": "alice",
        "action": "token.create",
        "target": "tok1",
        "workspace": None,
        "source": "127.0.0.1",
        "outcome": "ok",
        "detail": {"user": "ci-bot"},
    },
    {
        "id": 1,
        "at": T0,
        "actor": "bob",
        "action": "run.cancel",
        "target": "train-x7k2p",
        "workspace": "vision",
        "source": "10.0.0.7",
        "outcome": "denied",
        "detail": None,
    },
]


class FakeAdmin:
    """The admin part of Client, answering the documented shapes; records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail: Exception | None = None

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        if self.fail is not None:
            raise self.fail

    def create_workspace(self, name: str) -> dict[str, Any]:
        self._record("create_workspace", name)
        return {"name": name, "created_at": T0, "members": {}}

    def list_workspaces(self) -> dict[str, Any]:
        self._record("list_workspaces")
        return {"workspaces": copy.deepcopy(WORKSPACES)}

    def delete_workspace(self, name: str) -> None:
        self._record("delete_workspace", name)

    def set_member(self, workspace: str, user: str, role: str) -> dict[str, Any]:
        self._record("set_member", workspace, user, role)
        return {"workspace": workspace, "user": user, "role": role}

    def remove_member(self, workspace: str, user: str) -> None:
        self._record("remove_member", workspace, user)

    def create_user(self, name: str, kind: str = "user", admin: bool = False) -> dict[str, Any]:
        self._record("create_user", name, kind, admin)
        return {
            "name": name,
            "kind": kind,
            "admin": admin,
            "disabled": False,
            "created_at": T0,
            "memberships": {},
        }

    def list_users(self) -> dict[str, Any]:
        self._record("list_users")
        return {"users": copy.deepcopy(USERS)}

    def disable_user(self, name: str) -> dict[str, Any]:
        self._record("disable_user", name)
        return {**copy.deepcopy(USERS[0]), "name": name, "disabled": True}

    def create_token(
        self, user: str, name: str | None = None, expires_in_s: float | None = None
    ) -> dict[str, Any]:
        self._record("create_token", user, name, expires_in_s)
        return {
            "id": "tok9",
            "user": user,
            "name": name,
            "created_at": T0,
            "expires_at": None if expires_in_s is None else T0 + expires_in_s,
            "token": SECRET,
        }

    def list_tokens(self, user: str | None = None) -> dict[str, Any]:
        self._record("list_tokens", user)
        return {"tokens": [copy.deepcopy(t) for t in TOKENS if user in (None, t["user"])]}

    def revoke_token(self, token_id: str) -> None:
        self._record("revoke_token", token_id)

    def audit(self, **params: Any) -> dict[str, Any]:
        self._record("audit", params)
        return {"entries": copy.deepcopy(ENTRIES)}


@dataclass
class Out:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    client = FakeAdmin()
    monkeypatch.setattr(admin_identity, "connect", lambda: client)
    return client


@pytest.fixture
def tau(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """``tau ARGS`` through main(): exit codes and one-line errors as a user sees them."""

    def run(*args: str) -> Out:
        monkeypatch.setattr(sys, "argv", ["tau", *args])
        monkeypatch.delenv("TAU_DEBUG", raising=False)
        with pytest.raises(SystemExit) as exc:
            main()
        captured = capsys.readouterr()
        return Out(int(exc.value.code or 0), captured.out, captured.err)

    return run


# -- workspaces ---------------------------------------------------------------------------
def test_workspace_create(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "workspace", "create", "vision")
    assert r.code == 0, r.err
    assert r.out.splitlines()[0] == "workspace vision created"
    assert fake.calls == [("create_workspace", "vision")]
    r = tau("admin", "workspace", "create", "vision", "-o", "json")
    assert r.json() == {"name": "vision", "created_at": T0, "members": {}}


def test_workspace_list_table_and_json(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "workspace", "list")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == ["WORKSPACE", "CREATED", "MEMBERS"]
    assert lines[1].startswith("vision ") and lines[1].endswith("alice=maintainer, bob=researcher")
    assert lines[2].startswith("empty ") and lines[2].endswith(" -")
    assert tau("admin", "workspace", "list", "-o", "json").json() == {"workspaces": WORKSPACES}


def test_workspace_list_empty(fake: FakeAdmin, tau: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fake, "list_workspaces", lambda: {"workspaces": []})
    assert tau("admin", "workspace", "list").out.startswith("no workspaces")


def test_workspace_delete_and_its_conflict(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "workspace", "delete", "vision")
    assert (r.code, r.out) == (0, "workspace vision deleted\n")
    assert tau("admin", "workspace", "delete", "vision", "-o", "json").json() == {"ok": True}
    fake.fail = Conflict("workspace vision has 2 unfinished runs")
    r = tau("admin", "workspace", "delete", "vision")
    assert (r.code, r.out, r.err) == (7, "", "tau: workspace vision has 2 unfinished runs\n")


def test_add_and_remove_member(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "workspace", "add-member", "vision", "bob", "--role", "Maintainer")
    assert (r.code, r.out) == (0, "bob is maintainer in workspace vision\n")
    r = tau("admin", "workspace", "add-member", "vision", "bob", "--role", "viewer", "-o", "json")
    assert r.json() == {"workspace": "vision", "user": "bob", "role": "viewer"}
    r = tau("admin", "workspace", "remove-member", "vision", "bob")
    assert (r.code, r.out) == (0, "bob removed from workspace vision\n")
    assert tau("admin", "workspace", "remove-member", "vision", "bob", "-o", "json").json() == {
        "ok": True
    }
    assert fake.calls == [
        ("set_member", "vision", "bob", "maintainer"),
        ("set_member", "vision", "bob", "viewer"),
        ("remove_member", "vision", "bob"),
        ("remove_member", "vision", "bob"),
    ]


def test_unknown_role_is_a_usage_error_naming_the_roles(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "workspace", "add-member", "vision", "bob", "--role", "owner")
    assert r.code == 2
    assert r.err == (
        "tau: unknown role 'owner'; the roles are admin, maintainer, researcher, viewer\n"
    )
    assert fake.calls == []


# -- users --------------------------------------------------------------------------------
def test_user_add(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "user", "add", "alice")
    assert r.code == 0, r.err
    assert r.out.splitlines()[0] == "user alice added"
    r = tau("admin", "user", "add", "ci-bot", "--service")
    assert r.out.splitlines()[0] == "service account ci-bot added"
    r = tau("admin", "user", "add", "root", "--admin", "-o", "json")
    assert r.json() == {
        "name": "root",
        "kind": "user",
        "admin": True,
        "disabled": False,
        "created_at": T0,
        "memberships": {},
    }
    r = tau("admin", "user", "add", "gpu-agents", "--agent")
    assert r.out.splitlines()[0] == "GPU health agent account gpu-agents added"
    r = tau("admin", "user", "add", "bad", "--agent", "--admin")
    assert r.code == 2 and "--agent is an account of its own" in r.err
    assert fake.calls == [
        ("create_user", "alice", "user", False),
        ("create_user", "ci-bot", "service", False),
        ("create_user", "root", "user", True),
        ("create_user", "gpu-agents", "agent", False),
    ]


def test_user_list_and_disable(fake: FakeAdmin, tau: Any) -> None:
    lines = tau("admin", "user", "list").out.splitlines()
    assert lines[0].split() == ["USER", "KIND", "ADMIN", "STATUS", "CREATED", "WORKSPACES"]
    assert lines[1].split()[:4] == ["alice", "user", "yes", "active"]
    assert lines[1].endswith("vision=maintainer")
    assert lines[2].split()[:4] == ["ci-bot", "service", "-", "disabled"]
    assert tau("admin", "user", "list", "-o", "json").json() == {"users": USERS}
    r = tau("admin", "user", "disable", "bob")
    assert (r.code, r.out) == (0, "user bob disabled\n")
    assert tau("admin", "user", "disable", "bob", "-o", "json").json()["disabled"] is True


def test_non_admin_gets_not_found(fake: FakeAdmin, tau: Any) -> None:
    fake.fail = NotFound("not found")
    r = tau("admin", "user", "list")
    assert (r.code, r.err) == (5, "tau: not found\n")


# -- tokens -------------------------------------------------------------------------------
def test_token_create_shows_the_secret_once_on_stdout(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "token", "create", "--user", "ci-bot", "--name", "ci", "--expires", "30d")
    assert r.code == 0, r.err
    assert r.out == SECRET + "\n"  # nothing else: TOKEN=$(tau admin token create ...)
    assert len(r.err.splitlines()) == 1
    assert "tok9" in r.err and "will not be shown again" in r.err
    assert SECRET not in r.err
    assert fake.calls == [("create_token", "ci-bot", "ci", 30 * 86400.0)]


def test_token_create_json_is_the_whole_answer(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "token", "create", "--user", "alice", "-o", "json")
    assert r.json() == {
        "id": "tok9",
        "user": "alice",
        "name": None,
        "created_at": T0,
        "expires_at": None,
        "token": SECRET,
    }
    assert "will not be shown again" in r.err
    assert fake.calls == [("create_token", "alice", None, None)]


@pytest.mark.parametrize(
    ("expires", "seconds"), [("12h", 43200.0), ("1h30m", 5400.0), ("2w", 1209600.0), ("90", 90.0)]
)
def test_token_expires_durations(fake: FakeAdmin, tau: Any, expires: str, seconds: float) -> None:
    assert tau("admin", "token", "create", "--user", "u", "--expires", expires).code == 0
    assert fake.calls == [("create_token", "u", None, seconds)]


@pytest.mark.parametrize("expires", ["30 days", "soon", "-1d", "0s", "d30", ""])
def test_bad_expires_is_a_usage_error(fake: FakeAdmin, tau: Any, expires: str) -> None:
    r = tau("admin", "token", "create", "--user", "u", "--expires", expires)
    assert r.code == 2
    assert r.err.startswith("tau: --expires: ") and len(r.err.splitlines()) == 1
    assert fake.calls == []


def test_token_list_never_shows_secrets_and_says_status(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "token", "list")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == [
        "ID",
        "USER",
        "NAME",
        "STATUS",
        "CREATED",
        "EXPIRES",
        "LAST",
        "USED",
    ]
    assert lines[1].split()[:4] == ["tok1", "ci-bot", "ci", "active"]
    assert "never" in lines[1]
    assert lines[2].split()[:4] == ["tok2", "alice", "-", "expired"]
    assert lines[3].split()[:4] == ["tok3", "alice", "old", "revoked"]
    assert SECRET not in r.out
    assert tau("admin", "token", "list", "-o", "json").json() == {"tokens": TOKENS}
    r = tau("admin", "token", "list", "--user", "ci-bot", "-o", "json")
    assert [t["id"] for t in r.json()["tokens"]] == ["tok1"]
    assert fake.calls[-1] == ("list_tokens", "ci-bot")


def test_token_revoke(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "token", "revoke", "tok1")
    assert (r.code, r.out) == (0, "token tok1 revoked\n")
    assert tau("admin", "token", "revoke", "tok1", "-o", "json").json() == {"ok": True}
    assert fake.calls == [("revoke_token", "tok1")] * 2


# -- audit --------------------------------------------------------------------------------
def test_audit_table(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "audit")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == [
        "AT",
        "ACTOR",
        "ACTION",
        "TARGET",
        "WORKSPACE",
        "SOURCE",
        "OUTCOME",
        "DETAIL",
    ]
    assert lines[1].split()[2:] == [
        "alice",
        "token.create",
        "tok1",
        "-",
        "127.0.0.1",
        "ok",
        '{"user":"ci-bot"}',
    ]
    assert lines[2].split()[2:] == [
        "bob",
        "run.cancel",
        "train-x7k2p",
        "vision",
        "10.0.0.7",
        "denied",
        "-",
    ]
    assert fake.calls == [
        (
            "audit",
            {
                "actor": None,
                "action": None,
                "workspace": None,
                "since": None,
                "until": None,
                "limit": None,
            },
        )
    ]


def test_audit_filters_reach_the_api(fake: FakeAdmin, tau: Any) -> None:
    before = time.time()
    r = tau(
        "admin",
        "audit",
        "--actor",
        "bob",
        "--action",
        "run.cancel",
        "--workspace",
        "vision",
        "--since",
        "1d",
        "--until",
        "2000000000",
        "--limit",
        "10000",
    )
    assert r.code == 0, r.err
    params = fake.calls[0][1]
    assert (params["actor"], params["action"], params["workspace"]) == (
        "bob",
        "run.cancel",
        "vision",
    )
    assert before - 86400 - 1 <= params["since"] <= time.time() - 86400
    assert params["until"] == 2_000_000_000.0
    assert params["limit"] == 10000


def test_audit_since_iso_date(fake: FakeAdmin, tau: Any) -> None:
    from datetime import datetime

    assert tau("admin", "audit", "--since", "2025-01-31T12:00").code == 0
    assert fake.calls[0][1]["since"] == datetime(2025, 1, 31, 12, 0).timestamp()


def test_audit_json_and_jsonl_export(fake: FakeAdmin, tau: Any) -> None:
    assert tau("admin", "audit", "-o", "json").json() == {"entries": ENTRIES}
    r = tau("admin", "audit", "--jsonl")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert [json.loads(line) for line in lines] == ENTRIES  # newest first, as the API
    assert all(line.startswith("{") and "\n" not in line for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit", "0"], "tau: --limit must be between 1 and 10000\n"),
        (["--limit", "10001"], "tau: --limit must be between 1 and 10000\n"),
        (["--jsonl", "-o", "json"], "tau: --jsonl and -o json are two formats: give one\n"),
        (["--since", "1d", "--until", "2d"], "tau: --since is later than --until\n"),
    ],
)
def test_audit_bad_flags(fake: FakeAdmin, tau: Any, args: list[str], message: str) -> None:
    r = tau("admin", "audit", *args)
    assert (r.code, r.err) == (2, message)
    assert fake.calls == []


def test_audit_bad_time(fake: FakeAdmin, tau: Any) -> None:
    r = tau("admin", "audit", "--since", "yesterday")
    assert r.code == 2
    assert r.err.startswith("tau: --since: 'yesterday' is not a time") and r.err.count("\n") == 1


def test_policy_commands_are_still_there(tau: Any) -> None:
    r = tau("admin", "--help")
    assert r.code == 0
    for name in ("policy", "workspace", "user", "token", "audit"):
        assert f"  {name} " in r.out


# -- the client against a socket: 204 answers ----------------------------------------------
def _one_answer_server(answer: bytes) -> tuple[int, list[bytes], threading.Thread]:
    srv = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []

    def serve() -> None:
        with srv:
            conn, _ = srv.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                requests.append(data)
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return srv.getsockname()[1], requests, thread


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n",
    ],
)
def test_client_delete_with_204(answer: bytes) -> None:
    port, requests, thread = _one_answer_server(answer)
    client = Client(f"http://127.0.0.1:{port}", "tkn", timeout=5)
    assert client.revoke_token("tok/1") is None
    thread.join(5)
    assert requests[0].startswith(b"DELETE /api/v1/admin/tokens/tok%2F1 HTTP/1.1\r\n")
    assert b"Authorization: Bearer tkn\r\n" in requests[0]


def test_client_audit_query() -> None:
    body = b'{"entries": []}'
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    port, requests, thread = _one_answer_server(answer)
    client = Client(f"http://127.0.0.1:{port}", "tkn", timeout=5)
    assert client.audit(actor="bob", since=1.5, limit=5) == {"entries": []}
    thread.join(5)
    assert requests[0].startswith(b"GET /api/v1/admin/audit?actor=bob&since=1.5&limit=5 HTTP")
