"""/api/v1/whoami and administration: workspaces, members, users, tokens, audit.

Users, tokens, creating and deleting workspaces and the audit log are for platform
admins; a workspace's members are also managed by that workspace's ``admin`` role, and
its admins see it in the workspace list. Everyone else gets 404 (no hint that the
endpoint, or the workspace, exists). Every change, allowed or refused, is written to the
audit log.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from taugrid.domain.access import ROLES, Caller, administered_workspaces, can_manage_members
from taugrid.errors import Conflict, NotFound, UsageError
from taugrid.server.audit import audited
from taugrid.server.routes import require_admin
from taugrid.spec.models import NAME_PATTERN
from taugrid.store.identity import IdentityStore
from taugrid.store.runs import RunFilter

router = APIRouter(prefix="/api/v1")


class NewWorkspace(BaseModel):
    name: str = Field(pattern=NAME_PATTERN, max_length=63)


class NewUser(BaseModel):
    name: str = Field(pattern=NAME_PATTERN, max_length=63)
    kind: str = Field("user", pattern="^(user|service)$")
    admin: bool = False


class NewToken(BaseModel):
    user: str
    name: str | None = Field(None, max_length=63)
    expires_in_s: float | None = Field(None, gt=0)


class Membership(BaseModel):
    role: str


def _identity(request: Request) -> IdentityStore:
    store: IdentityStore = request.app.state.identity
    return store


def require_member_manager(request: Request, workspace: str) -> None:
    """A platform admin, or an admin of this workspace; 404 for everyone else."""
    caller: Caller = request.state.caller
    if not can_manage_members(caller, workspace):
        raise NotFound("not found")


@router.get("/whoami")
def whoami(request: Request) -> dict[str, Any]:
    caller: Caller = request.state.caller
    return {
        "user": caller.user,
        "kind": caller.kind,
        "admin": caller.platform_admin,
        "memberships": {w: r.value for w, r in sorted(caller.memberships.items())},
        "auth": caller.auth,
    }


# -- workspaces and members ----------------------------------------------------------------
@router.post("/admin/workspaces", status_code=201)
def create_workspace(body: NewWorkspace, request: Request) -> dict[str, Any]:
    with audited(request, "workspace.create", target=body.name, workspace=body.name):
        require_admin(request)
        made = _identity(request).create_workspace(body.name)
    queueing = request.app.state.service.queueing
    queueing.refresh_workspaces()  # the built-in policy gives it a queue at once
    note = queueing.workspace_note(body.name)  # an applied policy may not: say how to add it
    return {**made, "note": note} if note else made


@router.get("/admin/workspaces")
def list_workspaces(request: Request) -> dict[str, Any]:
    """Every workspace for platform admins; a workspace admin sees the ones they manage."""
    managed = administered_workspaces(request.state.caller)
    if managed is not None and not managed:
        raise NotFound("not found")
    rows = _identity(request).workspaces()
    return {"workspaces": [w for w in rows if managed is None or w["name"] in managed]}


@router.delete("/admin/workspaces/{name}", status_code=204)
def delete_workspace(name: str, request: Request) -> Response:
    with audited(request, "workspace.delete", target=name, workspace=name):
        require_admin(request)
        svc = request.app.state.service
        unfinished = [
            r
            for r in svc.store.list_runs(RunFilter(workspace=name), limit=1000)
            if r["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED")
        ]
        if unfinished:
            raise Conflict(f"workspace '{name}' has {len(unfinished)} unfinished runs")
        _identity(request).delete_workspace(name)
    request.app.state.service.queueing.refresh_workspaces()
    return Response(status_code=204)


@router.put("/admin/workspaces/{workspace}/members/{user}")
def set_member(workspace: str, user: str, body: Membership, request: Request) -> dict[str, Any]:
    with audited(request, "member.set", target=f"{user}={body.role}", workspace=workspace):
        require_member_manager(request, workspace)
        if body.role not in ROLES:
            raise UsageError(f"unknown role '{body.role}'; roles: {', '.join(ROLES)}")
        return _identity(request).set_member(workspace, user, body.role)


@router.delete("/admin/workspaces/{workspace}/members/{user}", status_code=204)
def remove_member(workspace: str, user: str, request: Request) -> Response:
    with audited(request, "member.remove", target=user, workspace=workspace):
        require_member_manager(request, workspace)
        _identity(request).remove_member(workspace, user)
    return Response(status_code=204)


# -- users and tokens ----------------------------------------------------------------------
@router.post("/admin/users", status_code=201)
def add_user(body: NewUser, request: Request) -> dict[str, Any]:
    with audited(request, "user.add", target=body.name):
        require_admin(request)
        return _identity(request).add_user(body.name, kind=body.kind, admin=body.admin)


@router.get("/admin/users")
def list_users(request: Request) -> dict[str, Any]:
    require_admin(request)
    return {"users": _identity(request).users()}


@router.post("/admin/users/{name}/disable")
def disable_user(name: str, request: Request) -> dict[str, Any]:
    with audited(request, "user.disable", target=name):
        require_admin(request)
        return _identity(request).disable_user(name)


@router.post("/admin/tokens", status_code=201)
def create_token(body: NewToken, request: Request) -> dict[str, Any]:
    with audited(request, "token.create", target=body.user) as entry:
        require_admin(request)
        made = _identity(request).create_token(
            body.user, name=body.name, expires_in_s=body.expires_in_s
        )
        entry["detail"] = f"token id {made.row['id']}"  # never the secret
    return {**made.row, "token": made.secret}


@router.get("/admin/tokens")
def list_tokens(request: Request, user: str | None = None) -> dict[str, Any]:
    require_admin(request)
    return {"tokens": _identity(request).tokens(user)}


@router.delete("/admin/tokens/{tid}", status_code=204)
def revoke_token(tid: str, request: Request) -> Response:
    with audited(request, "token.revoke", target=tid):
        require_admin(request)
        _identity(request).revoke_token(tid)
    return Response(status_code=204)


# -- audit -----------------------------------------------------------------------------------
@router.get("/admin/audit")
def list_audit(
    request: Request,
    actor: str | None = None,
    action: str | None = None,
    workspace: str | None = None,
    since: float | None = None,
    until: float | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 100,
) -> dict[str, Any]:
    require_admin(request)
    entries = _identity(request).audit_entries(
        actor=actor, action=action, workspace=workspace, since=since, until=until, limit=limit
    )
    return {"entries": entries}
