"""Who may do what (roles per workspace). Pure: decisions over plain data.

A caller is a user (or a service account) with a role in some workspaces. Platform admins
(``admin`` users, or an ``admin`` role anywhere) may do everything everywhere. Within a
workspace: ``maintainer`` anything, including other people's runs; ``researcher`` submits,
reads the workspace's runs, and cancels, resumes or reruns only their own; ``viewer``
reads. Outside their workspaces callers see nothing: the API answers as if the workspace
or run did not exist, so existence does not leak.
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


@dataclass(frozen=True)
class Caller:
    user: str
    admin: bool = False
    memberships: Mapping[str, Role] = field(default_factory=dict)
    kind: str = "user"  # user | service
    auth: str = "token"  # local | token | oidc

    @property
    def platform_admin(self) -> bool:
        return self.admin or Role.ADMIN in self.memberships.values()

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
