"""Identity service: what /api/v1/whoami and the administration endpoints do, without HTTP.

The routes (access_routes.py) parse the request, audit it and call one method here; each
method decides for itself whether the caller may do it, so the rule lives next to the
operation rather than in whichever route remembers to check. Users, tokens, creating and
deleting workspaces and the audit log are for platform admins; a workspace's members are
also managed by that workspace's ``admin`` role, and its admins see it in the workspace
list. Everyone else gets NotFound("not found"): no hint that the endpoint, or the
workspace, exists. Answers are the plain data the API returns as JSON.
"""

from __future__ import annotations

from typing import Any

from taugrid.domain.access import (
    AGENT_KIND,
    ROLES,
    Caller,
    administered_workspaces,
    can_manage_members,
)
from taugrid.domain.states import RunState
from taugrid.errors import Conflict, NotFound, UsageError
from taugrid.server.queueing import Queueing
from taugrid.store import RunStore
from taugrid.store.identity import IdentityStore
from taugrid.store.runs import RunFilter


class IdentityService:
    def __init__(self, identity: IdentityStore, runs: RunStore, queueing: Queueing) -> None:
        self.identity = identity
        self.runs = runs
        self.queueing = queueing

    def whoami(self, caller: Caller) -> dict[str, Any]:
        return {
            "user": caller.user,
            "kind": caller.kind,
            "admin": caller.platform_admin,
            "memberships": {w: r.value for w, r in sorted(caller.memberships.items())},
            "auth": caller.auth,
        }

    # -- workspaces and members ------------------------------------------------------------
    def create_workspace(self, caller: Caller, name: str) -> dict[str, Any]:
        _require_admin(caller)
        made = self.identity.create_workspace(name)
        self.queueing.refresh_workspaces()  # the built-in policy gives it a queue at once
        note = self.queueing.workspace_note(name)  # an applied policy may not: say how to add it
        return {**made, "note": note} if note else made

    def list_workspaces(self, caller: Caller) -> dict[str, Any]:
        """Every workspace for platform admins; a workspace admin sees the ones they manage."""
        managed = administered_workspaces(caller)
        if managed is not None and not managed:
            raise NotFound("not found")
        rows = self.identity.workspaces()
        return {"workspaces": [w for w in rows if managed is None or w["name"] in managed]}

    def delete_workspace(self, caller: Caller, name: str) -> None:
        """Refused while the workspace has runs that have not finished."""
        _require_admin(caller)
        # Asked of the store by state: an old run still going is found however many
        # newer runs the workspace has.
        live = [s.value for s in RunState if not s.terminal]
        unfinished = self.runs.list_runs(RunFilter(workspace=name, states=live), limit=1000)
        if unfinished:
            many = f"{len(unfinished)}+" if len(unfinished) == 1000 else str(len(unfinished))
            raise Conflict(f"workspace '{name}' has {many} unfinished runs")
        self.identity.delete_workspace(name)
        self.queueing.refresh_workspaces()

    def set_member(self, caller: Caller, workspace: str, user: str, role: str) -> dict[str, Any]:
        _require_member_manager(caller, workspace)
        if role not in ROLES:
            raise UsageError(f"unknown role '{role}'; roles: {', '.join(ROLES)}")
        return self.identity.set_member(workspace, user, role)

    def remove_member(self, caller: Caller, workspace: str, user: str) -> None:
        _require_member_manager(caller, workspace)
        self.identity.remove_member(workspace, user)

    # -- users and tokens ------------------------------------------------------------------
    def add_user(
        self, caller: Caller, name: str, *, kind: str = "user", admin: bool = False
    ) -> dict[str, Any]:
        _require_admin(caller)
        if kind == AGENT_KIND and admin:
            raise UsageError("a GPU health agent's account cannot be an admin")
        return self.identity.add_user(name, kind=kind, admin=admin)

    def list_users(self, caller: Caller) -> dict[str, Any]:
        _require_admin(caller)
        return {"users": self.identity.users()}

    def disable_user(self, caller: Caller, name: str) -> dict[str, Any]:
        _require_admin(caller)
        return self.identity.disable_user(name)

    def create_token(
        self,
        caller: Caller,
        user: str,
        *,
        name: str | None = None,
        expires_in_s: float | None = None,
    ) -> dict[str, Any]:
        """The token's row and, under ``token``, its secret: the only time it is shown."""
        _require_admin(caller)
        made = self.identity.create_token(user, name=name, expires_in_s=expires_in_s)
        return {**made.row, "token": made.secret}

    def list_tokens(self, caller: Caller, user: str | None = None) -> dict[str, Any]:
        _require_admin(caller)
        return {"tokens": self.identity.tokens(user)}

    def revoke_token(self, caller: Caller, tid: str) -> None:
        _require_admin(caller)
        self.identity.revoke_token(tid)

    # -- audit -----------------------------------------------------------------------------
    def audit_entries(
        self,
        caller: Caller,
        *,
        actor: str | None = None,
        action: str | None = None,
        workspace: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        _require_admin(caller)
        entries = self.identity.audit_entries(
            actor=actor, action=action, workspace=workspace, since=since, until=until, limit=limit
        )
        return {"entries": entries}


def _require_admin(caller: Caller) -> None:
    if not caller.platform_admin:
        raise NotFound("not found")


def _require_member_manager(caller: Caller, workspace: str) -> None:
    """A platform admin, or an admin of this workspace."""
    if not can_manage_members(caller, workspace):
        raise NotFound("not found")
