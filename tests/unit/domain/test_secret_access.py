"""Who may list, set and delete a workspace's secrets and personal ones (pure decisions)."""

from __future__ import annotations

import pytest

from taugrid.domain.access import (
    Caller,
    Role,
    SecretAccess,
    can_manage_personal_secrets,
    can_manage_workspace_secrets,
    secret_access,
)

ALLOW, FORBIDDEN, HIDDEN = SecretAccess.ALLOW, SecretAccess.FORBIDDEN, SecretAccess.HIDDEN


def member(role: Role) -> Caller:
    return Caller("u", memberships={"a": role})


PLATFORM_ADMIN = Caller("root", admin=True)
OUTSIDER = Caller("o", memberships={"b": Role.MAINTAINER})


@pytest.mark.parametrize(
    ("caller", "list_", "personal", "workspace"),
    [
        (PLATFORM_ADMIN, ALLOW, ALLOW, ALLOW),
        (member(Role.ADMIN), ALLOW, ALLOW, ALLOW),
        (member(Role.MAINTAINER), ALLOW, ALLOW, ALLOW),
        (member(Role.RESEARCHER), ALLOW, ALLOW, FORBIDDEN),
        (member(Role.VIEWER), FORBIDDEN, FORBIDDEN, FORBIDDEN),
        (OUTSIDER, HIDDEN, HIDDEN, HIDDEN),  # a maintainer elsewhere is nobody in "a"
        (Caller("n"), HIDDEN, HIDDEN, HIDDEN),
    ],
)
def test_matrix(
    caller: Caller, list_: SecretAccess, personal: SecretAccess, workspace: SecretAccess
) -> None:
    assert secret_access(caller, "a", personal=False, change=False) is list_
    assert secret_access(caller, "a", personal=True, change=False) is list_
    assert secret_access(caller, "a", personal=True, change=True) is personal
    assert secret_access(caller, "a", personal=False, change=True) is workspace


def test_helpers_agree_with_the_matrix() -> None:
    assert can_manage_workspace_secrets(member(Role.MAINTAINER), "a")
    assert not can_manage_workspace_secrets(member(Role.RESEARCHER), "a")
    assert can_manage_personal_secrets(member(Role.RESEARCHER), "a")
    assert not can_manage_personal_secrets(member(Role.VIEWER), "a")
    assert not can_manage_personal_secrets(member(Role.RESEARCHER), "b")
