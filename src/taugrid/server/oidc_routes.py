"""OIDC login routes; they need no bearer token. Without ``--oidc-issuer`` every one
answers 404 ``not_found``. The protocol is in :mod:`taugrid.server.oidc`."""

from __future__ import annotations

import html
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from taugrid.errors import NotFound, TauError
from taugrid.server.client_address import request_source
from taugrid.server.oidc import (
    DEVICE_TTL_S,
    NOT_CONFIGURED,
    POLL_INTERVAL_S,
    LoginState,
    OIDCLogin,
)
from taugrid.server.portal_session import set_session_cookie
from taugrid.store.identity import IdentityStore

router = APIRouter()


def _oidc(request: Request) -> OIDCLogin:
    oidc: OIDCLogin | None = getattr(request.app.state, "oidc", None)
    if oidc is None:
        raise NotFound(NOT_CONFIGURED)
    return oidc


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _source(request: Request) -> str | None:
    return request_source(request)


def _page(title: str, text: str, status: int = 200) -> HTMLResponse:
    body = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head>"
        f"<body><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>"
    )
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def _audit(request: Request, actor: str, target: str, outcome: str, detail: str | None) -> None:
    identity: IdentityStore = request.app.state.identity
    identity.audit(
        {
            "actor": actor[:63],
            "action": "auth.login",
            "target": target,
            "workspace": None,
            "source": _source(request),
            "outcome": outcome[:32],
            "detail": detail[:2000] if detail else None,
        }
    )


@router.post("/api/v1/auth/device")
def device(request: Request) -> dict[str, Any]:
    dev = _oidc(request).new_device()
    uri = f"{_base(request)}/auth/device"
    return {
        "device_code": dev.device_code,
        "user_code": dev.user_code,
        "verification_uri": uri,
        "verification_uri_complete": f"{uri}?user_code={dev.user_code}",
        "interval": POLL_INTERVAL_S,
        "expires_in": int(DEVICE_TTL_S),
    }


@router.post("/api/v1/auth/device/token")
def device_token(
    request: Request, device_code: Annotated[str, Body(embed=True, max_length=200)]
) -> dict[str, Any]:
    user, made = _oidc(request).poll(device_code)
    return {"token": made.secret, "user": user, "expires_at": made.row["expires_at"]}


@router.get("/auth/device", response_model=None)
def device_page(request: Request, user_code: str = "") -> Response:
    oidc = _oidc(request)
    try:
        url = oidc.begin_device(user_code, f"{_base(request)}/auth/callback")
    except NotFound:
        return _page(
            "Unknown code",
            "This login code is unknown, expired or already used; run tau login again.",
            400,
        )
    except TauError as exc:
        return _page("Login failed", exc.message, exc.http_status)
    return RedirectResponse(url, status_code=302)


@router.get("/auth/login", response_model=None)
def portal_login(request: Request, next: str = "/") -> Response:
    oidc = _oidc(request)
    if not next.startswith("/") or next.startswith("//") or "\\" in next:
        next = "/"  # only paths on this server: no open redirect
    try:
        url = oidc.begin_portal(f"{_base(request)}/auth/callback", next)
    except TauError as exc:
        return _page("Login failed", exc.message, exc.http_status)
    return RedirectResponse(url, status_code=302)


@router.get("/auth/callback", response_model=None)
def callback(
    request: Request, state: str = "", code: str = "", error: str = "", error_description: str = ""
) -> Response:
    oidc = _oidc(request)
    try:
        st = oidc.take_state(state)
    except TauError as exc:
        _audit(request, "-", "callback", "bad_state", exc.message)
        return _page("Login failed", exc.message, 400)
    target = "device" if st.device_code else "portal"
    if error or not code:
        why = f"the provider refused: {error or 'no code'} {error_description}".strip()
        oidc.deny(st, why)
        _audit(request, "-", target, "denied", why)
        return _page("Login failed", why, 400)
    return _finish(request, oidc, st, code, target)


def _finish(request: Request, oidc: OIDCLogin, st: LoginState, code: str, target: str) -> Response:
    try:
        done = oidc.finish(st, code)
    except TauError as exc:
        oidc.deny(st, exc.message)
        _audit(request, "-", target, exc.code, exc.message)
        status = exc.http_status if exc.http_status >= 400 else 400
        return _page("Login failed", exc.message, status)
    _audit(request, done.user, target, "ok", None)
    if done.session is None:
        return _page("Logged in", f"Logged in as {done.user}; return to your terminal.")
    resp = RedirectResponse(done.next_path, status_code=302)
    set_session_cookie(resp, request, done.session.secret)
    return resp
