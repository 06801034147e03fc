"""The portal's browser session: how a browser logs in, and what every action must carry.

Three ways in, one cookie (``tau_session``, HttpOnly, SameSite=Lax, Secure beyond
loopback):

- OIDC (``/auth/login``, server/oidc_routes.py): the cookie holds an API token named
  ``portal``.
- ``tau portal`` asks ``POST /api/v1/portal/link`` for a one-time link: a ticket, good for
  60 s and one use, that ``GET /portal/login?ticket=`` trades for the cookie. An API-token
  caller gets a ``portal`` API token of its own (revocable with ``tau admin token``); the
  machine's owner (the local token) gets a value signed with the local token, so it lives
  as long as the token file does, and survives a server restart without being stored.
- Nothing else: the local token itself never goes into a browser.

CSRF: every state-changing request authenticated by the cookie must carry the session's
CSRF token (an HMAC of the cookie with a server-only key) in ``X-CSRF-Token`` or the form
field ``csrf``; SameSite=Lax already keeps other sites' POSTs cookie-less, this is the
second lock.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from taugrid.domain.access import Caller
from taugrid.errors import AuthError
from taugrid.server.auth import Authenticator
from taugrid.server.oidc import SESSION_COOKIE, SESSION_TTL_S

TICKET_TTL_S = 60.0
MAX_TICKETS = 1000  # outstanding at once: a caller asking in a loop cannot grow memory
LOCAL_PREFIX = "taulocal."
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _sign(key: str, text: str) -> str:
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def local_session(local_token: str, now: float | None = None) -> str:
    """A session value for the machine's owner, valid for ``SESSION_TTL_S``."""
    expires = int((time.time() if now is None else now) + SESSION_TTL_S)
    return f"{LOCAL_PREFIX}{expires}.{_sign(local_token, f'portal-session:{expires}')}"


def is_local_session(value: str, local_token: str, now: float | None = None) -> bool:
    """Whether ``value`` is an unexpired session signed with ``local_token``."""
    if not value.startswith(LOCAL_PREFIX):
        return False
    expires, _, sig = value[len(LOCAL_PREFIX) :].partition(".")
    if not expires.isdigit() or int(expires) < (time.time() if now is None else now):
        return False
    return hmac.compare_digest(sig, _sign(local_token, f"portal-session:{expires}"))


async def session_caller(auth: Authenticator, session: str, source: str) -> Caller:
    """Who a session cookie stands for (the API's and the portal's one reading): the
    machine's owner when it is signed with the local token (no I/O), else its API token's
    caller (looked up in the thread pool); AuthError or RateLimited as for a header."""
    if is_local_session(session, auth.local_token):
        return auth.owner()
    return await run_in_threadpool(auth.caller, f"Bearer {session}", source)


def csrf_token(key: str, session: str) -> str:
    """The CSRF token of one session (derived, so nothing is stored per session)."""
    return _sign(key, f"csrf:{session}")[:40]


def csrf_ok(key: str, session: str, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(csrf_token(key, session), presented or "")


def cookie_secure(host: str | None, scheme: str) -> bool:
    """Secure cookies beyond loopback: a browser on the server's own machine may use plain
    http; anywhere else the cookie travels only over https (behind a TLS-terminating
    Ingress the server sees http, and the browser https)."""
    if scheme == "https":
        return True
    name = (host or "").rsplit(":", 1)[0].strip("[]") if host else ""
    if name == "localhost":
        return False
    try:
        return not ipaddress.ip_address(name).is_loopback
    except ValueError:
        return True


def set_session_cookie(resp: Response, request: Request, value: str) -> None:
    """The portal's session cookie, as every login sets it (OIDC's and ``tau portal``'s)."""
    resp.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=int(SESSION_TTL_S),
        httponly=True,
        samesite="lax",
        secure=cookie_secure(request.headers.get("host"), request.url.scheme),
        path="/",
    )


@dataclass(frozen=True)
class Ticket:
    caller: Caller
    next_path: str
    expires_at: float


class Tickets:
    """One-time login tickets, in memory: a ticket outlives neither its 60 s nor the
    server (``tau portal`` asks for another)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._tickets: dict[str, Ticket] = {}
        self._lock = threading.Lock()

    def issue(self, caller: Caller, next_path: str = "/portal/") -> str:
        with self._lock:
            self._expire()
            if len(self._tickets) >= MAX_TICKETS:
                oldest = min(self._tickets, key=lambda k: self._tickets[k].expires_at)
                del self._tickets[oldest]
            ticket = secrets.token_urlsafe(32)
            self._tickets[ticket] = Ticket(caller, next_path, self.clock() + TICKET_TTL_S)
            return ticket

    def redeem(self, ticket: str) -> Ticket:
        with self._lock:
            self._expire()
            found = self._tickets.pop(ticket, None)
        if found is None:
            raise AuthError("unknown, expired or already used portal link; run tau portal again")
        return found

    def _expire(self) -> None:
        now = self.clock()
        for key in [k for k, t in self._tickets.items() if t.expires_at <= now]:
            del self._tickets[key]


def safe_next(path: str | None, default: str = "/portal/") -> str:
    """Only paths on this server: no open redirect."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return default
    return path
