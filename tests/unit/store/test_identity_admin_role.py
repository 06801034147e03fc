"""An ``admin`` membership (by hand or from OIDC's ``tau:<ws>:admin``) makes a workspace
admin, never a platform admin; only the user's admin flag does."""

from __future__ import annotations

from sqlalchemy import Engine

from taugrid.domain.access import Role
from taugrid.store.identity import IdentityStore


def test_an_admin_membership_is_not_the_platform_admin_flag(engine: Engine) -> None:
    ids = IdentityStore(engine)
    for ws in ("a", "b"):
        ids.create_workspace(ws)
    ids.add_user("boss")
    ids.sync_grants("boss", admin=False, roles={"a": "admin"})  # what OIDC does
    made = ids.create_token("boss")
    caller = ids.authenticate(made.secret)
    assert caller is not None and not caller.platform_admin
    assert caller.role_in("a") is Role.ADMIN and caller.role_in("b") is None

    ids.sync_grants("boss", admin=True, roles={"a": "admin"})  # tau:admin
    caller = ids.authenticate(made.secret)
    assert caller is not None and caller.platform_admin and caller.role_in("b") is Role.ADMIN
