"""IdentityService on a real SQLite store, without HTTP: who may administer what, and
what each operation answers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from taugrid.domain.access import Caller, Role
from taugrid.domain.states import Reason, RunState
from taugrid.errors import Conflict, NotFound, UsageError
from taugrid.server.identity_service import IdentityService
from taugrid.server.queueing import Machine, Queueing
from taugrid.store import RunStore, connect
from taugrid.store.identity import IdentityStore, parse_token
from taugrid.store.policies import PolicyStore
from taugrid.store.runs import Transition

ROOT = Caller("root", admin=True)
MEMBER = Caller("rae", memberships={"vision": Role.RESEARCHER})
BOSS = Caller("boss", memberships={"vision": Role.ADMIN, "audio": Role.VIEWER})


@dataclass
class Setup:
    service: IdentityService
    identity: IdentityStore
    runs: RunStore


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    db = connect(f"sqlite:///{tmp_path / 'tau.db'}")
    identity = IdentityStore(db)
    runs = RunStore(db)
    queueing = Queueing(
        PolicyStore(db),
        Machine((), 8000, 1 << 34),
        lambda: [w["name"] for w in identity.workspaces()],
    )
    yield Setup(IdentityService(identity, runs, queueing), identity, runs)
    db.dispose()


def _queued_run(runs: RunStore, run_id: str, workspace: str) -> None:
    row = dict(
        id=run_id,
        name="train",
        workspace=workspace,
        queue="default",
        priority=None,
        submitter="rae",
        idempotency_key=None,
        spec_source="tau.yaml",
        spec_file_text=None,
        spec_overrides=[],
        spec_resolved={"command": ["python", "train.py"]},
        spec_hash="h" * 64,
        snapshot_digest="d" * 64,
        env_summary={"PATH": "/bin"},
        gpus=0,
    )
    steps = [
        Transition(RunState.PENDING, Reason.SUBMITTED, "submitted"),
        Transition(RunState.QUEUED, Reason.QUEUED, "queued"),
    ]
    runs.create_run(row, steps)


def test_a_platform_admin_does_everything(setup: Setup) -> None:
    svc = setup.service
    made = svc.create_workspace(ROOT, "vision")
    assert made["name"] == "vision" and made["members"] == {}
    assert "note" not in made  # the built-in policy gives it a queue at once
    assert [w["name"] for w in svc.list_workspaces(ROOT)["workspaces"]] == ["vision"]

    assert svc.add_user(ROOT, "ann")["name"] == "ann"
    assert svc.add_user(ROOT, "ci", kind="service")["kind"] == "service"
    assert {u["name"] for u in svc.list_users(ROOT)["users"]} == {"ann", "ci"}
    assert svc.set_member(ROOT, "vision", "ann", "researcher") == {
        "workspace": "vision",
        "user": "ann",
        "role": "researcher",
    }
    assert svc.list_workspaces(ROOT)["workspaces"][0]["members"] == {"ann": "researcher"}
    with pytest.raises(UsageError, match="roles: admin, maintainer, researcher, viewer"):
        svc.set_member(ROOT, "vision", "ann", "owner")
    svc.remove_member(ROOT, "vision", "ann")
    with pytest.raises(NotFound, match="not a member"):
        svc.remove_member(ROOT, "vision", "ann")

    token = svc.create_token(ROOT, "ann", name="laptop", expires_in_s=60)
    tid, _ = parse_token(token["token"]) or ("", "")
    assert token["id"] == tid and token["user"] == "ann" and token["name"] == "laptop"
    assert "salt" not in token and "hash" not in token
    assert setup.identity.authenticate(token["token"]) is not None
    listed = svc.list_tokens(ROOT, "ann")["tokens"]
    assert [t["id"] for t in listed] == [tid] and "token" not in listed[0]
    svc.revoke_token(ROOT, tid)
    assert setup.identity.authenticate(token["token"]) is None
    assert svc.disable_user(ROOT, "ann")["disabled"]

    setup.identity.audit({"actor": "root", "action": "user.add", "outcome": "ok"})
    assert [e["action"] for e in svc.audit_entries(ROOT, actor="root")["entries"]] == ["user.add"]
    svc.delete_workspace(ROOT, "vision")
    assert svc.list_workspaces(ROOT)["workspaces"] == []
    assert svc.whoami(ROOT) == {
        "user": "root",
        "kind": "user",
        "admin": True,
        "memberships": {},
        "auth": "token",
    }


def test_a_plain_member_is_told_admin_operations_do_not_exist(setup: Setup) -> None:
    svc = setup.service
    svc.create_workspace(ROOT, "vision")
    svc.add_user(ROOT, "rae")
    tid = svc.create_token(ROOT, "rae")["id"]
    refused = [
        lambda: svc.create_workspace(MEMBER, "other"),
        lambda: svc.list_workspaces(MEMBER),
        lambda: svc.delete_workspace(MEMBER, "vision"),
        lambda: svc.set_member(MEMBER, "vision", "rae", "admin"),
        lambda: svc.remove_member(MEMBER, "vision", "rae"),
        lambda: svc.add_user(MEMBER, "eve", admin=True),
        lambda: svc.list_users(MEMBER),
        lambda: svc.disable_user(MEMBER, "rae"),
        lambda: svc.create_token(MEMBER, "rae"),
        lambda: svc.list_tokens(MEMBER),
        lambda: svc.revoke_token(MEMBER, tid),
        lambda: svc.audit_entries(MEMBER),
    ]
    for call in refused:
        with pytest.raises(NotFound) as exc:
            call()
        assert exc.value.message == "not found"  # no hint of what exists
    assert svc.list_workspaces(ROOT)["workspaces"][0]["name"] == "vision"  # nothing changed
    assert svc.whoami(MEMBER)["memberships"] == {"vision": "researcher"}


def test_a_workspace_admin_manages_its_own_workspace_only(setup: Setup) -> None:
    svc = setup.service
    for ws in ("vision", "audio", "text"):
        svc.create_workspace(ROOT, ws)
    svc.add_user(ROOT, "ann")
    assert svc.set_member(BOSS, "vision", "ann", "viewer")["role"] == "viewer"
    svc.remove_member(BOSS, "vision", "ann")
    for ws in ("audio", "text"):  # a viewer in audio, nothing in text
        with pytest.raises(NotFound, match=r"^not found$"):
            svc.set_member(BOSS, ws, "ann", "viewer")
    with pytest.raises(NotFound, match=r"^not found$"):
        svc.set_member(BOSS, "nowhere", "ann", "viewer")  # as for one that exists
    assert [w["name"] for w in svc.list_workspaces(BOSS)["workspaces"]] == ["vision"]
    with pytest.raises(NotFound, match=r"^not found$"):
        svc.delete_workspace(BOSS, "vision")  # deleting is the platform admins'


def test_a_workspace_with_unfinished_runs_is_not_deleted(setup: Setup) -> None:
    svc = setup.service
    svc.create_workspace(ROOT, "vision")
    _queued_run(setup.runs, "train-00001", "vision")
    with pytest.raises(Conflict, match="workspace 'vision' has 1 unfinished runs"):
        svc.delete_workspace(ROOT, "vision")
    assert [w["name"] for w in svc.list_workspaces(ROOT)["workspaces"]] == ["vision"]
    setup.runs.cancel_many(["train-00001"])  # never started: CANCELLED at once
    svc.delete_workspace(ROOT, "vision")
    assert svc.list_workspaces(ROOT)["workspaces"] == []
    with pytest.raises(NotFound, match="no workspace 'vision'"):
        svc.delete_workspace(ROOT, "vision")
