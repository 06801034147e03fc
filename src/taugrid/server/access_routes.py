"""/api/v1/whoami and administration: workspaces, members, users, tokens, audit.

The routes are thin: they parse the body, write the audit log and call the
IdentityService (server/identity_service.py), which decides who may do what. Users,
tokens, creating and deleting workspaces and the audit log are for platform admins; a
workspace's members are also managed by that workspace's ``admin`` role. Everyone else
gets 404. Every change, allowed or refused, is written to the audit log: ``audited`` wraps
the service call, so a refusal there is recorded like any other error.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from taugrid.domain.access import Caller
from taugrid.server.audit import audited
from taugrid.server.identity_service import IdentityService
from taugrid.spec.models import NAME_PATTERN

router = APIRouter(prefix="/api/v1")


class NewWorkspace(BaseModel):
    name: str = Field(pattern=NAME_PATTERN, max_length=63)


class NewUser(BaseModel):
    name: str = Field(pattern=NAME_PATTERN, max_length=63)
    kind: str = Field("user", pattern="^(user|service|agent)$")
    admin: bool = False


class NewToken(BaseModel):
    user: str
    name: str | None = Field(None, max_length=63)
    expires_in_s: float | None = Field(None, gt=0)


class Membership(BaseModel):
    role: str


def _identity(request: Request) -> IdentityService:
    service: IdentityService = request.app.state.identity_service
    return service


def _caller(request: Request) -> Caller:
    caller: Caller = request.state.caller
    return caller


@router.get("/whoami")
def whoami(request: Request) -> dict[str, Any]:
    return _identity(request).whoami(_caller(request))


# -- workspaces and members ----------------------------------------------------------------
@router.post("/admin/workspaces", status_code=201)
def create_workspace(body: NewWorkspace, request: Request) -> dict[str, Any]:
    with audited(request, "workspace.create", target=body.name, workspace=body.name):
        return _identity(request).create_workspace(_caller(request), body.name)


@router.get("/admin/workspaces")
def list_workspaces(request: Request) -> dict[str, Any]:
    return _identity(request).list_workspaces(_caller(request))


@router.delete("/admin/workspaces/{name}", status_code=204)
def delete_workspace(name: str, request: Request) -> Response:
    with audited(request, "workspace.delete", target=name, workspace=name):
        _identity(request).delete_workspace(_caller(request), name)
    return Response(status_code=204)


@router.put("/admin/workspaces/{workspace}/members/{user}")
def set_member(workspace: str, user: str, body: Membership, request: Request) -> dict[str, Any]:
    with audited(request, "member.set", target=f"{user}={body.role}", workspace=workspace):
        return _identity(request).set_member(_caller(request), workspace, user, body.role)


@router.delete("/admin/workspaces/{workspace}/members/{user}", status_code=204)
def remove_member(workspace: str, user: str, request: Request) -> Response:
    with audited(request, "member.remove", target=user, workspace=workspace):
        _identity(request).remove_member(_caller(request), workspace, user)
    return Response(status_code=204)


# -- users and tokens ----------------------------------------------------------------------
@router.post("/admin/users", status_code=201)
def add_user(body: NewUser, request: Request) -> dict[str, Any]:
    with audited(request, "user.add", target=body.name):
        return _identity(request).add_user(
            _caller(request), body.name, kind=body.kind, admin=body.admin
        )


@router.get("/admin/users")
def list_users(request: Request) -> dict[str, Any]:
    return _identity(request).list_users(_caller(request))


@router.post("/admin/users/{name}/disable")
def disable_user(name: str, request: Request) -> dict[str, Any]:
    with audited(request, "user.disable", target=name):
        return _identity(request).disable_user(_caller(request), name)


@router.post("/admin/tokens", status_code=201)
def create_token(body: NewToken, request: Request) -> dict[str, Any]:
    with audited(request, "token.create", target=body.user) as entry:
        made = _identity(request).create_token(
            _caller(request), body.user, name=body.name, expires_in_s=body.expires_in_s
        )
        entry["detail"] = f"token id {made['id']}"  # never the secret
    return made


@router.get("/admin/tokens")
def list_tokens(request: Request, user: str | None = None) -> dict[str, Any]:
    return _identity(request).list_tokens(_caller(request), user)


@router.delete("/admin/tokens/{tid}", status_code=204)
def revoke_token(tid: str, request: Request) -> Response:
    with audited(request, "token.revoke", target=tid):
        _identity(request).revoke_token(_caller(request), tid)
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
    return _identity(request).audit_entries(
        _caller(request),
        actor=actor,
        action=action,
        workspace=workspace,
        since=since,
        until=until,
        limit=limit,
    )
