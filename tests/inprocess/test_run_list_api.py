"""GET /api/v1/runs filters on the real app (in process): `queue`, `user` (the submitter),
`until` and `q` (free text) reach the store's one list query, combine with the old
filters, and a caller's search never shows another workspace's runs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from taugrid.domain.states import Reason, RunState
from taugrid.server.app import create_app
from taugrid.server.settings import ServerSettings
from taugrid.store.runs import MAX_SEARCH_CHARS, Transition

S = RunState
# Finished runs: the engine has nothing to do with them.
DONE = [
    Transition(S.PENDING, Reason.SUBMITTED, "submitted"),
    Transition(S.CANCELLED, Reason.CANCELLED, "cancelled"),
]


@dataclass
class Api:
    http: TestClient
    admin: dict[str, str]  # the machine owner's local token: every workspace
    alice: dict[str, str]  # a researcher in workspace a only


def run(run_id: str, name: str, workspace: str, submitter: str, queue: str) -> dict[str, Any]:
    return dict(
        id=run_id,
        name=name,
        workspace=workspace,
        queue=queue,
        priority=None,
        submitter=submitter,
        idempotency_key=None,
        spec_source="tau.yaml",
        spec_file_text="command: x",
        spec_overrides=[],
        spec_resolved={"command": "x"},
        spec_hash="h" * 64,
        snapshot_digest="d" * 64,
        env_summary={},
        gpus=0,
    )


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    home = tmp_path / "home"
    settings = ServerSettings(home=home, db_url=f"sqlite:///{tmp_path / 't.db'}", gpus=0)
    app = create_app(settings)
    with TestClient(app) as http:
        identity = app.state.identity
        for ws in ("a", "b"):
            identity.create_workspace(ws)
        identity.add_user("alice")
        identity.set_member("a", "alice", "researcher")
        alice = identity.create_token("alice").secret
        store = app.state.service.store
        clock = iter(float(t) for t in range(100, 1000))
        store.clock = lambda: next(clock)
        for r in [  # created at 100, 101, ... in this order
            run("sweep-aaaaa", "sweep", "a", "alice", "main"),
            run("sweep-bbbbb", "sweep", "a", "bob", "big"),
            run("sweep-ccccc", "sweep", "b", "alice", "main"),
            run("p_c-ddddd", "p_c", "b", "carol", "main"),
            run("pxc-eeeee", "pxc", "a", "bob", "main"),
        ]:
            store.create_run(r, DONE)
        token = (home / "token").read_text().strip()
        yield Api(http, {"Authorization": f"Bearer {token}"}, {"Authorization": f"Bearer {alice}"})


def ids(api: Api, who: dict[str, str], **params: Any) -> list[str]:
    resp = api.http.get("/api/v1/runs", params=params, headers=who)
    assert resp.status_code == 200, resp.text
    return [r["id"] for r in resp.json()["runs"]]


def test_queue_user_until_and_q(api: Api) -> None:
    admin = api.admin
    assert ids(api, admin, queue="big") == ["sweep-bbbbb"]
    assert ids(api, admin, user="alice") == ["sweep-ccccc", "sweep-aaaaa"]
    assert ids(api, admin, until=101) == ["sweep-aaaaa"]
    assert ids(api, admin, q="SWEEP", user="alice", workspace="b") == ["sweep-ccccc"]
    assert ids(api, admin, q="sweep", state="cancelled", since=101, until=102) == ["sweep-bbbbb"]
    assert ids(api, admin, q="CAROL") == ["p_c-ddddd"]  # the submitter


def test_q_wildcards_are_literal(api: Api) -> None:
    assert ids(api, api.admin, q="p_c") == ["p_c-ddddd"]  # not pxc
    assert ids(api, api.admin, q="%") == []


def test_a_search_shows_only_the_callers_workspaces(api: Api) -> None:
    assert ids(api, api.admin, q="sweep") == ["sweep-ccccc", "sweep-bbbbb", "sweep-aaaaa"]
    assert ids(api, api.alice, q="sweep") == ["sweep-bbbbb", "sweep-aaaaa"]
    assert ids(api, api.alice, q="sweep", user="alice") == ["sweep-aaaaa"]
    assert ids(api, api.alice, q="carol") == []  # b's run, found for the admin above
    assert ids(api, api.alice, q="p_c", workspace="b") == []


def test_an_overlong_q_is_refused(api: Api) -> None:
    resp = api.http.get(
        "/api/v1/runs", params={"q": "x" * (MAX_SEARCH_CHARS + 1)}, headers=api.admin
    )
    assert resp.status_code == 422, resp.text
    assert ids(api, api.admin, q="x" * MAX_SEARCH_CHARS) == []
