"""IdentityStore against real SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from taugrid.domain.access import Role
from taugrid.errors import Conflict, NotFound, UsageError
from taugrid.store.identity import IdentityStore, parse_token
from taugrid.store.tables import tokens


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_tokens_are_stored_as_salted_hashes_and_checked(engine: Engine) -> None:
    clock = Clock()
    ids = IdentityStore(engine, clock)
    ids.add_user("ann")
    ids.create_workspace("vision")
    ids.set_member("vision", "ann", "researcher")
    made = ids.create_token("ann", name="laptop", expires_in_s=60)
    tid, secret = parse_token(made.secret) or ("", "")
    with engine.connect() as conn:
        row = conn.execute(select(tokens)).mappings().one()
    assert row["id"] == tid and secret not in str(dict(row)) and len(row["hash"]) == 64
    caller = ids.authenticate(made.secret)
    assert caller is not None and caller.user == "ann"
    assert caller.memberships == {"vision": Role.RESEARCHER} and not caller.platform_admin
    assert ids.authenticate(made.secret + "x") is None
    assert ids.authenticate(f"tau_{tid}_" + "A" * len(secret)) is None
    assert ids.authenticate("tau_ffffffffffff_" + secret) is None
    clock.now += 61
    assert ids.authenticate(made.secret) is None  # expired
    other = ids.create_token("ann")
    ids.revoke_token(other.row["id"])
    assert ids.authenticate(other.secret) is None
    with pytest.raises(NotFound):
        ids.revoke_token(other.row["id"])  # already revoked


def test_disabled_users_and_membership_rules(engine: Engine) -> None:
    ids = IdentityStore(engine)
    ids.add_user("bob")
    with pytest.raises(Conflict):
        ids.add_user("bob")
    token = ids.create_token("bob").secret
    ids.disable_user("bob")
    assert ids.authenticate(token) is None
    with pytest.raises(NotFound):
        ids.set_member("nope", "bob", "viewer")
    ids.create_workspace("w")
    with pytest.raises(UsageError, match="roles: admin, maintainer, researcher, viewer"):
        ids.set_member("w", "bob", "owner")
    ids.set_member("w", "bob", "viewer")
    ids.set_member("w", "bob", "maintainer")  # changes the role, no duplicate
    assert ids.workspaces()[0]["members"] == {"bob": "maintainer"}
    ids.remove_member("w", "bob")
    assert ids.user("bob")["memberships"] == {}
    ids.delete_workspace("w")
    assert ids.workspaces() == []


def test_audit_is_append_only_and_filtered(engine: Engine) -> None:
    clock = Clock()
    ids = IdentityStore(engine, clock)
    for i, actor in enumerate(["ann", "bob", "ann"]):
        clock.now = 1000.0 + i
        ids.audit({"actor": actor, "action": "run.cancel", "outcome": "ok", "target": str(i)})
    assert [e["target"] for e in ids.audit_entries()] == ["2", "1", "0"]
    assert [e["target"] for e in ids.audit_entries(actor="ann")] == ["2", "0"]
    assert [e["target"] for e in ids.audit_entries(since=1001, until=1002)] == ["1"]
