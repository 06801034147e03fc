import pytest

from taugrid.domain.access import (
    Caller,
    Role,
    can_change_run,
    can_read,
    can_submit,
    visible_workspaces,
)

R = Role
ADMIN = Caller("root", admin=True)
WS_ADMIN = Caller("boss", memberships={"b": R.ADMIN})
MAINT = Caller("mia", memberships={"a": R.MAINTAINER})
RES = Caller("rae", memberships={"a": R.RESEARCHER, "b": R.VIEWER})
VIEW = Caller("vic", memberships={"a": R.VIEWER})
NOBODY = Caller("nob")


@pytest.mark.parametrize(
    ("caller", "read_a", "submit_a", "change_own", "change_other"),
    [
        (ADMIN, True, True, True, True),
        (WS_ADMIN, False, False, False, False),  # admin of b only: nothing in a
        (MAINT, True, True, True, True),
        (RES, True, True, True, False),
        (VIEW, True, False, False, False),
        (NOBODY, False, False, False, False),
    ],
)
def test_roles_in_workspace_a(
    caller: Caller, read_a: bool, submit_a: bool, change_own: bool, change_other: bool
) -> None:
    assert can_read(caller, "a") is read_a
    assert can_submit(caller, "a") is submit_a
    assert can_change_run(caller, "a", caller.user) is change_own
    assert can_change_run(caller, "a", "someone-else") is change_other


def test_roles_do_not_carry_across_workspaces() -> None:
    assert not can_read(MAINT, "b") and not can_submit(MAINT, "b")
    assert can_read(RES, "b") and not can_submit(RES, "b")
    assert not can_change_run(RES, "b", "rae")


def test_visible_workspaces() -> None:
    assert visible_workspaces(ADMIN) is None
    assert visible_workspaces(WS_ADMIN) == {"b"}  # a workspace admin is no platform admin
    assert visible_workspaces(RES) == {"a", "b"}
    assert visible_workspaces(NOBODY) == frozenset()
