"""Logging a browser in and out (the flows are described in server/portal_session.py)."""

from __future__ import annotations

import contextlib
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from taugrid.domain.access import AGENT_KIND, Caller
from taugrid.errors import AuthError, Forbidden, TauError
from taugrid.server.audit import audited
from taugrid.server.auth import Authenticator
from taugrid.server.oidc import SESSION_COOKIE, SESSION_TTL_S
from taugrid.server.portal.access import Viewer, acting_viewer
from taugrid.server.portal.web import page
from taugrid.server.portal_session import (
    TICKET_TTL_S,
    Tickets,
    local_session,
    safe_next,
    set_session_cookie,
)
from taugrid.store.identity import IdentityStore, parse_token

router = APIRouter(include_in_schema=False)
link_router = APIRouter(prefix="/api/v1")  # behind the API's token check


class LinkIn(BaseModel):
    next: str = "/portal/"


class LinkOut(BaseModel):
    url: str
    expires_in_s: float


def tickets(request: Request) -> Tickets:
    found: Tickets = request.app.state.portal_tickets
    return found


@link_router.post("/portal/link", response_model=LinkOut)
def portal_link(body: LinkIn, request: Request) -> LinkOut:
    """A one-time URL that logs a browser in as the caller (``tau portal``)."""
    caller: Caller = request.state.caller
    if caller.kind == AGENT_KIND:
        raise Forbidden("an agent's token has no portal")
    ticket = tickets(request).issue(caller, safe_next(body.next))
    base = str(request.base_url).rstrip("/")
    return LinkOut(url=f"{base}/portal/login?ticket={ticket}", expires_in_s=TICKET_TTL_S)


@router.get("/portal/login")
def login(request: Request, ticket: str = "", next: str = "/portal/") -> Response:
    if not ticket:
        return login_page(request, "Log in", safe_next(next), 200)
    try:
        found = tickets(request).redeem(ticket)
    except AuthError as exc:
        return login_page(request, exc.message, "/portal/", exc.http_status)
    auth: Authenticator = request.app.state.auth
    request.state.caller = found.caller
    with audited(request, "portal.login", target=found.caller.user):
        if found.caller.auth == "local":
            value = local_session(auth.local_token)
        else:  # a revocable API token of the caller's own, named as OIDC's sessions are
            identity: IdentityStore = request.app.state.identity
            made = identity.create_token(
                found.caller.user, name="portal", expires_in_s=SESSION_TTL_S
            )
            value = made.secret
    resp = RedirectResponse(found.next_path, status_code=303)
    set_session_cookie(resp, request, value)
    return resp


def login_page(request: Request, title: str, next_path: str, status: int) -> Response:
    return page(
        "login.html",
        {
            "title": title,
            "next": next_path,
            "oidc": request.app.state.oidc is not None,
            "caller": None,
            "nav": "",
        },
        status,
    )


@router.post("/portal/logout")
async def logout(request: Request, who: Annotated[Viewer, Depends(acting_viewer)]) -> Response:
    parsed = parse_token(who.session)
    if parsed is not None:  # an API-token session dies with its cookie
        identity: IdentityStore = request.app.state.identity
        with contextlib.suppress(TauError):  # already revoked or gone: the cookie goes
            await run_in_threadpool(identity.revoke_token, parsed[0])
    resp = RedirectResponse("/portal/login", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp
