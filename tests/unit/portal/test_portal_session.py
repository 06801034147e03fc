"""The portal's session pieces: one-time tickets, the owner's signed session, CSRF tokens,
when cookies are Secure, and where a login may send the browser."""

from __future__ import annotations

import pytest

from taugrid.domain.access import Caller
from taugrid.errors import AuthError
from taugrid.server.oidc import SESSION_TTL_S
from taugrid.server.portal_session import (
    MAX_TICKETS,
    TICKET_TTL_S,
    Tickets,
    cookie_secure,
    csrf_ok,
    csrf_token,
    is_local_session,
    local_session,
    safe_next,
)

ALICE = Caller("alice", memberships={})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_ticket_logs_in_once() -> None:
    tickets = Tickets(Clock())
    t = tickets.issue(ALICE, "/portal/runs")
    found = tickets.redeem(t)
    assert found.caller == ALICE and found.next_path == "/portal/runs"
    with pytest.raises(AuthError, match="already used"):
        tickets.redeem(t)


def test_a_ticket_expires() -> None:
    clock = Clock()
    tickets = Tickets(clock)
    t = tickets.issue(ALICE)
    clock.now += TICKET_TTL_S + 0.1
    with pytest.raises(AuthError):
        tickets.redeem(t)


def test_unknown_tickets_are_refused_and_outstanding_ones_are_bounded() -> None:
    tickets = Tickets(Clock())
    with pytest.raises(AuthError):
        tickets.redeem("made-up")
    first = tickets.issue(ALICE)
    for _ in range(MAX_TICKETS):
        tickets.issue(ALICE)
    with pytest.raises(AuthError):  # the oldest made room
        tickets.redeem(first)


def test_the_owners_session_is_signed_with_the_local_token_and_expires() -> None:
    value = local_session("secret-token", now=0.0)
    assert is_local_session(value, "secret-token", now=10.0)
    assert not is_local_session(value, "another-token", now=10.0)
    assert not is_local_session(value, "secret-token", now=SESSION_TTL_S + 1)
    forged = value.rsplit(".", 1)[0] + "." + "0" * 64
    assert not is_local_session(forged, "secret-token", now=10.0)
    # A later expiry with the old signature does not pass either.
    stretched = value.replace(str(int(SESSION_TTL_S)), str(int(SESSION_TTL_S) + 999))
    assert not is_local_session(stretched, "secret-token", now=10.0)
    assert not is_local_session("tau_abc_def", "secret-token")


def test_csrf_tokens_belong_to_one_session() -> None:
    token = csrf_token("key", "session-1")
    assert csrf_ok("key", "session-1", token)
    assert not csrf_ok("key", "session-2", token)
    assert not csrf_ok("other-key", "session-1", token)
    assert not csrf_ok("key", "session-1", None)
    assert not csrf_ok("key", "session-1", "")


@pytest.mark.parametrize(
    ("host", "scheme", "secure"),
    [
        ("127.0.0.1:8080", "http", False),
        ("localhost:8080", "http", False),
        ("[::1]:8080", "http", False),
        ("tau.example.com", "http", True),  # behind a TLS-terminating Ingress
        ("10.0.0.5:8080", "http", True),
        ("127.0.0.1:8080", "https", True),
        (None, "http", True),
    ],
)
def test_cookies_are_secure_beyond_loopback(host: str | None, scheme: str, secure: bool) -> None:
    assert cookie_secure(host, scheme) is secure


@pytest.mark.parametrize(
    ("asked", "went"),
    [
        ("/portal/runs?state=FAILED", "/portal/runs?state=FAILED"),
        ("https://evil.example/", "/portal/"),
        ("//evil.example/", "/portal/"),
        ("/\\evil.example", "/portal/"),
        ("", "/portal/"),
        (None, "/portal/"),
    ],
)
def test_a_login_only_goes_to_this_servers_paths(asked: str | None, went: str) -> None:
    assert safe_next(asked) == went
