"""Who is looking: the portal's session cookie checked with the API's own authenticator,
and the run service scoped to that caller. A missing or dead session sends the browser
to the login page; a change without the session's CSRF token is refused (403)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

from fastapi import Request

from taugrid.domain.access import AGENT_KIND, Caller, can_change_run
from taugrid.errors import AuthError, Forbidden, RequestTooLarge
from taugrid.server.auth import Authenticator
from taugrid.server.client_address import request_source
from taugrid.server.oidc import SESSION_COOKIE
from taugrid.server.portal_session import (
    CSRF_FIELD,
    CSRF_HEADER,
    csrf_ok,
    csrf_token,
    session_caller,
)
from taugrid.server.services import RunService


class NeedLogin(AuthError):
    """No live portal session: answered with the login page."""


@dataclass(frozen=True)
class Viewer:
    caller: Caller
    svc: RunService
    session: str
    csrf: str

    def may_change(self, workspace: str, submitter: str) -> bool:
        """Whether to offer cancel, resume and rerun: the predicate the service applies
        (the service checks again on the action; this only hides useless buttons)."""
        return can_change_run(self.caller, workspace, submitter)


async def viewer(request: Request) -> Viewer:
    session = request.cookies.get(SESSION_COOKIE)
    if not session:
        raise NeedLogin("log in to see the portal")
    auth: Authenticator = request.app.state.auth
    try:
        caller = await session_caller(auth, session, request_source(request))
    except AuthError as exc:  # expired or revoked: log in again (a 429 stays a 429)
        raise NeedLogin("your portal session has ended; log in again") from exc
    if caller.kind == AGENT_KIND:
        raise NeedLogin("an agent's token has no portal")
    request.state.caller = caller  # the audit log reads it
    svc: RunService = request.app.state.service
    return Viewer(caller, svc.for_caller(caller), session, csrf_token(auth.local_token, session))


async def acting_viewer(request: Request) -> Viewer:
    """The viewer of a change: the form's (or htmx's header) CSRF token must match."""
    who = await viewer(request)
    presented = request.headers.get(CSRF_HEADER)
    if presented is None:
        presented = (await form_fields(request)).get(CSRF_FIELD)
    auth: Authenticator = request.app.state.auth
    if not csrf_ok(auth.local_token, who.session, presented):
        raise Forbidden("the form's CSRF token is missing or wrong; reload the page and retry")
    return who


MAX_FORM_BYTES = 64 * 1024  # the portal's forms: a CSRF token, a run reference, overrides


async def form_fields(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the last value of a repeated one; ``overrides`` are
    one per line, in one field)."""
    cached: dict[str, str] | None = getattr(request.state, "portal_form", None)
    if cached is not None:
        return cached
    body = b""
    async for piece in request.stream():
        body += piece
        if len(body) > MAX_FORM_BYTES:
            raise RequestTooLarge(f"a portal form is at most {MAX_FORM_BYTES} bytes")
    fields = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    request.state.portal_form = fields
    return fields
