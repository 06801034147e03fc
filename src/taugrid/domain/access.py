"""Who may do what (roles per workspace). Pure: decisions over plain data.

A caller is a user (or a service account) with a role in some workspaces. Platform admins
(users with the ``admin`` flag, and the local token) may do everything everywhere; that
flag is granted on its own, never by a role. Within a workspace: ``admin`` manages it
(its members and secrets) and may do anything a ``maintainer`` may; ``maintainer``
anything with runs, including other people's; ``researcher`` submits, reads the
workspace's runs, and cancels, resumes or reruns only their own; ``viewer`` reads. Users,
tokens, the policy, creating and deleting workspaces and the audit log are the platform
admins' alone. Outside their workspaces callers see nothing: the API answers as if the
workspace or run did not exist, so existence does not leak.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    MAINTAINER = "maintainer"
    RESEARCHER = "researcher"
    VIEWER = "viewer"


ROLES = tuple(r.value for r in Role)


# A GPU health agent's account (one per cluster, its token in the agents' DaemonSet): it
# may send health reports and nothing else (server/app.py refuses it every other route).
AGENT_KIND = "agent"
AGENT_ROUTE = "/api/v1/health/reports"


@dataclass(frozen=True)
class Caller:
    user: str
    admin: bool = False
    memberships: Mapping[str, Role] = field(default_factory=dict)
    kind: str = "user"  # user | service | agent
    auth: str = "token"  # local | token | oidc

    @property
    def platform_admin(self) -> bool:
        """The user's admin flag (or the local token): an ``admin`` role in a workspace
        manages that workspace only."""
        return self.admin

    def role_in(self, workspace: str) -> Role | None:
        if self.platform_admin:
            return Role.ADMIN
        return self.memberships.get(workspace)


def visible_workspaces(caller: Caller) -> frozenset[str] | None:
    """The workspaces whose runs the caller may list; None means every workspace."""
    if caller.platform_admin:
        return None
    return frozenset(caller.memberships)


def can_read(caller: Caller, workspace: str) -> bool:
    return caller.role_in(workspace) is not None


def can_submit(caller: Caller, workspace: str) -> bool:
    return caller.role_in(workspace) in (Role.ADMIN, Role.MAINTAINER, Role.RESEARCHER)


def can_change_run(caller: Caller, workspace: str, submitter: str) -> bool:
    """Cancel, resume (and rerun, which submits anew from the record)."""
    role = caller.role_in(workspace)
    if role in (Role.ADMIN, Role.MAINTAINER):
        return True
    return role is Role.RESEARCHER and submitter == caller.user


def can_manage_members(caller: Caller, workspace: str) -> bool:
    """Add, remove and change members of the workspace: its admins and platform admins."""
    return caller.role_in(workspace) is Role.ADMIN


def administered_workspaces(caller: Caller) -> frozenset[str] | None:
    """The workspaces whose members the caller manages; None means every workspace."""
    if caller.platform_admin:
        return None
    return frozenset(w for w, r in caller.memberships.items() if r is Role.ADMIN)


def visible_local_queues(
    caller: Caller, local_queues: Mapping[tuple[str, str], str]
) -> dict[tuple[str, str], str]:
    """The local queues ``(workspace, queue) -> cluster queue`` the caller may see: all
    for platform admins, their workspaces' for everyone else. The cluster queues those
    feed are the ones the caller may see (whole: they are shared)."""
    seen = visible_workspaces(caller)
    return {k: cq for k, cq in local_queues.items() if seen is None or k[0] in seen}


# -- secrets ----------------------------------------------------------------------------
# A workspace's secrets are shared by its runs; a personal secret (a user's own, within a
# workspace) is used by that user's runs only, in place of a workspace secret of the same
# reference. Values never leave the server; these decide who may set, delete and list refs.


class SecretAccess(StrEnum):
    ALLOW = "allow"
    FORBIDDEN = "forbidden"  # a member whose role does not allow it: 403
    HIDDEN = "hidden"  # not a member: the workspace does not exist for the caller (404)


def can_manage_workspace_secrets(caller: Caller, workspace: str) -> bool:
    """Set and delete the workspace's secrets: platform admins, the workspace's admins and
    maintainers."""
    return caller.role_in(workspace) in (Role.ADMIN, Role.MAINTAINER)


def can_manage_personal_secrets(caller: Caller, workspace: str) -> bool:
    """Set and delete one's own personal secrets in the workspace: whoever may submit there
    (a personal secret is only ever used by one's own runs)."""
    return can_submit(caller, workspace)


def secret_access(caller: Caller, workspace: str, *, personal: bool, change: bool) -> SecretAccess:
    """May ``caller`` list (``change`` false) or set/delete secrets of ``workspace``?

    Listing shows references to those who may submit there (a viewer's runs use none);
    each sees the workspace's refs and only their own personal ones.
    """
    if caller.role_in(workspace) is None:
        return SecretAccess.HIDDEN
    if not change or personal:
        allowed = can_manage_personal_secrets(caller, workspace)
    else:
        allowed = can_manage_workspace_secrets(caller, workspace)
    return SecretAccess.ALLOW if allowed else SecretAccess.FORBIDDEN
