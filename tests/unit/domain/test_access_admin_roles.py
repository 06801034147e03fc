"""Platform admin is the user's flag alone; a workspace ``admin`` role manages that
workspace (members, secrets, every run in it) and nothing beyond it."""

from taugrid.domain.access import (
    Caller,
    Role,
    administered_workspaces,
    can_change_run,
    can_manage_members,
    can_read,
    can_submit,
    visible_local_queues,
    visible_workspaces,
)

PLATFORM = Caller("root", admin=True)
WS_ADMIN = Caller("boss", memberships={"a": Role.ADMIN, "b": Role.VIEWER})
MAINT = Caller("mia", memberships={"a": Role.MAINTAINER})
RES = Caller("rae", memberships={"a": Role.RESEARCHER})

LOCAL_QUEUES = {("a", "main"): "shared", ("b", "main"): "shared", ("b", "big"): "gpu-b"}


def test_an_admin_role_in_a_workspace_is_not_platform_admin() -> None:
    assert PLATFORM.platform_admin
    assert not WS_ADMIN.platform_admin
    assert visible_workspaces(WS_ADMIN) == {"a", "b"}  # its memberships, not everything
    assert not can_read(WS_ADMIN, "c") and not can_submit(WS_ADMIN, "c")


def test_a_workspace_admin_manages_its_workspace_only() -> None:
    assert can_manage_members(WS_ADMIN, "a")
    assert not can_manage_members(WS_ADMIN, "b")  # a viewer there
    assert not can_manage_members(WS_ADMIN, "c")
    assert not can_manage_members(MAINT, "a")  # maintainers manage runs, not members
    assert can_manage_members(PLATFORM, "anything")
    # Every run in the workspace, like a maintainer; nothing in b, where it only reads.
    assert can_change_run(WS_ADMIN, "a", "someone-else")
    assert not can_change_run(WS_ADMIN, "b", "someone-else")


def test_role_in_stays_admin_for_platform_admins() -> None:
    assert PLATFORM.role_in("any") is Role.ADMIN
    assert WS_ADMIN.role_in("a") is Role.ADMIN and WS_ADMIN.role_in("c") is None


def test_administered_workspaces() -> None:
    assert administered_workspaces(PLATFORM) is None
    assert administered_workspaces(WS_ADMIN) == {"a"}
    assert administered_workspaces(RES) == frozenset()


def test_visible_local_queues() -> None:
    assert visible_local_queues(PLATFORM, LOCAL_QUEUES) == LOCAL_QUEUES
    assert visible_local_queues(RES, LOCAL_QUEUES) == {("a", "main"): "shared"}
    assert visible_local_queues(Caller("nobody"), LOCAL_QUEUES) == {}
