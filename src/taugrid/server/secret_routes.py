"""HTTP routes of /api/v1/secrets: set, list and delete a workspace's secrets and one's own
personal ones. Values go in, never out.

``PUT /secrets/{ref}?workspace=W&scope=workspace|personal`` with ``{"value": str}`` -> 204;
``GET /secrets?workspace=W`` -> ``{"workspace", "secrets": [{"ref", "scope", "owner",
"updated_at"}]}``; ``DELETE /secrets/{ref}?workspace=W&scope=...`` -> 204 (404 when not
set). Without ``workspace`` the workspace is ``default``, without ``scope`` ``workspace``
(the paths of before workspaces keep working). References contain ``/`` (``hf/token``):
the client sends them percent-encoded and the path converter takes the rest of the path.

Who may do what is ``domain.access.secret_access``: non-members get 404 for the
workspace, a member whose role does not allow it 403 with what to do instead. Every set
and delete, allowed or refused, is audited (reference, workspace, scope; never a value).

The body is read here, not declared as a pydantic model: a validation error would echo
the input, which is the value. It is refused unread (413) when Content-Length says it is
too big, and checked for its shape (one object with one string member) before it is parsed,
so nesting cannot make the parser recurse. No error repeats any part of it. The store's
calls block on fsync, so they run in the thread pool.
"""

from __future__ import annotations

import json
import re

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from taugrid.domain.access import Caller, Role, SecretAccess, secret_access
from taugrid.domain.secret_refs import (
    DEFAULT_WORKSPACE,
    MAX_VALUE_BYTES,
    check_ref,
    check_value,
    check_workspace,
    refuse_value_as_ref,
    set_command,
)
from taugrid.errors import Forbidden, NotFound, RequestTooLarge, UsageError
from taugrid.ports.secrets import SecretScope, SecretStore
from taugrid.server.audit import audited

# Generous for JSON escapes (a \uXXXX per character at worst); the value is checked after.
MAX_BODY_BYTES = 8 * MAX_VALUE_BYTES
SCOPES = ("workspace", "personal")
BODY_SHAPE = 'the body must be JSON: {"value": "..."}'
TOO_BIG = (
    f"the request body is over {MAX_BODY_BYTES // 1024} KiB: "
    f"a secret value is at most {MAX_VALUE_BYTES // 1024} KiB"
)

# A JSON string (possessive: no backtracking); what is left without them is the skeleton.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_JSON_SPACE = re.compile(rb"[ \t\r\n]+")

router = APIRouter(prefix="/api/v1", tags=["secrets"])


class SecretOut(BaseModel):
    ref: str
    scope: str  # workspace | personal
    owner: str | None  # the user of a personal secret
    updated_at: float


class SecretList(BaseModel):
    workspace: str
    secrets: list[SecretOut]


def _store(request: Request) -> SecretStore:
    store: SecretStore = request.app.state.secrets
    return store


def value_from(body: bytes) -> str:
    """The value of a ``{"value": "..."}`` body; :class:`UsageError` (never echoing the
    body) for anything else. The skeleton is checked before ``json.loads`` sees the
    bytes, so a deeply nested body is refused without recursing."""
    if len(body) > MAX_BODY_BYTES:
        raise RequestTooLarge(TOO_BIG)
    skeleton = _JSON_SPACE.sub(b"", _JSON_STRING.sub(b'""', body))
    if skeleton != b'{"":""}':
        raise UsageError(BODY_SHAPE)
    try:
        data = json.loads(body)
    except ValueError:
        raise UsageError(BODY_SHAPE) from None
    if not isinstance(data, dict) or set(data) != {"value"}:
        raise UsageError(BODY_SHAPE)
    return check_value(data["value"])


async def _read_body(request: Request) -> bytes:
    """The body, at most MAX_BODY_BYTES; a bigger one is refused before (or while) it is
    read, not after it has been held whole."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise RequestTooLarge(TOO_BIG)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise RequestTooLarge(TOO_BIG)
        chunks.append(chunk)
    return b"".join(chunks)


def _scope_is_personal(scope: str | None) -> bool:
    if scope is None:
        return False
    if scope not in SCOPES:
        raise UsageError("scope must be 'workspace' or 'personal'")
    return scope == "personal"


def _workspace_known(request: Request, workspace: str) -> bool:
    """A workspace of the identity store or of the policy in force (local mode's
    workspaces come from the policy alone)."""
    if request.app.state.identity.workspace_exists(workspace):
        return True
    local_queues = request.app.state.service.queueing.policy.domain.local_queues
    return any(ws == workspace for ws, _ in local_queues)


def _authorize(
    request: Request, workspace: str, *, personal: bool, change: bool, ref: str | None = None
) -> Caller:
    caller: Caller = request.state.caller
    verdict = secret_access(caller, workspace, personal=personal, change=change)
    if verdict is SecretAccess.HIDDEN or (
        caller.platform_admin and not _workspace_known(request, workspace)
    ):
        raise NotFound(f"workspace '{workspace}' does not exist")
    if verdict is SecretAccess.FORBIDDEN:
        role = caller.role_in(workspace)
        if role is Role.VIEWER:
            raise Forbidden(
                f"{caller.user} is a viewer in workspace '{workspace}': secrets are for "
                "those who can submit runs there (researcher and up)"
            )
        raise Forbidden(
            f"{caller.user} is a {role} in workspace '{workspace}': only its maintainers "
            "and admins set or delete its shared secrets; a personal secret is used by "
            f"your runs only: {set_command(ref or 'REF', workspace, personal=True)}"
        )
    return caller


def _scope(caller: Caller, workspace: str, personal: bool) -> SecretScope:
    return SecretScope(workspace, caller.user if personal else None)


_PUT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"value": {"type": "string", "minLength": 1}},
                    "required": ["value"],
                    "additionalProperties": False,
                }
            }
        },
    }
}


@router.put("/secrets/{ref:path}", status_code=204, openapi_extra=_PUT_BODY)
async def put_secret(
    ref: str, request: Request, workspace: str | None = None, scope: str | None = None
) -> Response:
    """Set (or replace) a secret of the workspace, or a personal one (``scope=personal``)."""
    try:
        body, body_error = await _read_body(request), None
    except RequestTooLarge as exc:
        body, body_error = b"", exc
    await run_in_threadpool(_set, request, ref, workspace, scope, body, body_error)
    return Response(status_code=204)


def _set(
    request: Request,
    ref: str,
    workspace: str | None,
    scope: str | None,
    body: bytes,
    body_error: RequestTooLarge | None,
) -> None:
    with audited(request, "secret.set") as entry:
        refuse_value_as_ref(ref)  # before the audit entry records it
        ws, ref, personal = _target(entry, ref, workspace, scope)
        caller = _authorize(request, ws, personal=personal, change=True, ref=ref)
        if body_error is not None:
            raise body_error
        _store(request).set(_scope(caller, ws, personal), ref, value_from(body))


def _target(
    entry: dict[str, object], ref: str, workspace: str | None, scope: str | None
) -> tuple[str, str, bool]:
    """Checked workspace, reference and scope, recorded on the audit entry as each passes
    (what fails its check is never recorded: it may be a value typed in the wrong place)."""
    ws = check_workspace(DEFAULT_WORKSPACE if workspace is None else workspace)
    entry["workspace"] = ws
    personal = _scope_is_personal(scope)
    entry["detail"] = "personal" if personal else "workspace"
    entry["target"] = check_ref(ref)
    return ws, ref, personal


@router.get("/secrets", response_model=SecretList)
def list_secrets(request: Request, workspace: str | None = None) -> SecretList:
    """The workspace's secrets and the caller's personal ones there: references, scope
    and when each was last set; never values, never another user's personal refs."""
    ws = check_workspace(DEFAULT_WORKSPACE if workspace is None else workspace)
    caller = _authorize(request, ws, personal=True, change=False)
    store = _store(request)
    entries = [*store.entries(SecretScope(ws, caller.user)), *store.entries(SecretScope(ws))]
    return SecretList(
        workspace=ws,
        secrets=[
            SecretOut(ref=e.ref, scope=e.scope, owner=e.owner, updated_at=e.updated_at)
            for e in sorted(entries, key=lambda e: (e.ref, e.scope))
        ],
    )


@router.delete("/secrets/{ref:path}", status_code=204)
def delete_secret(
    ref: str, request: Request, workspace: str | None = None, scope: str | None = None
) -> Response:
    """Delete a secret of the workspace or a personal one; 404 when it is not set."""
    with audited(request, "secret.delete") as entry:
        ws, ref, personal = _target(entry, ref, workspace, scope)
        caller = _authorize(request, ws, personal=personal, change=True, ref=ref)
        target = _scope(caller, ws, personal)
        if not _store(request).delete(target, ref):
            raise NotFound(f"secret '{ref}' is not set in {target}")
    return Response(status_code=204)
