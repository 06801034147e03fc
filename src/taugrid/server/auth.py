"""Who is calling: the local token file (the machine's owner, an implicit admin), or an API
token from the identity store. Failed attempts are rate limited per source address.
"""

from __future__ import annotations

import contextlib
import getpass
import hmac
import os
import secrets
import threading
import time
from collections import deque
from pathlib import Path

from taugrid.domain.access import Caller
from taugrid.errors import AuthError, RateLimited
from taugrid.store.identity import IdentityStore

MAX_FAILURES = 10  # per source, within FAILURE_WINDOW_S, before it is blocked
FAILURE_WINDOW_S = 60.0
BLOCK_S = 60.0


def ensure_token(path: Path) -> str:
    """Read the local token, creating it (mode 0600, atomically) on first start."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    with contextlib.suppress(FileExistsError):  # another server won the race: keep theirs
        os.link(tmp, path)
    tmp.unlink()
    return path.read_text().strip()


def token_matches(header: str | None, token: str) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[7:].strip().encode(), token.encode())


class FailureLimiter:
    """Counts failed authentications per source; blocks a source that fails too often."""

    def __init__(self) -> None:
        self._fails: dict[str, deque[float]] = {}
        self._blocked_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def check(self, source: str) -> None:
        with self._lock:
            until = self._blocked_until.get(source)
            if until is not None and time.monotonic() < until:
                raise RateLimited(
                    f"too many failed logins from {source}; try again in "
                    f"{until - time.monotonic():.0f}s"
                )

    def failed(self, source: str) -> None:
        now = time.monotonic()
        with self._lock:
            q = self._fails.setdefault(source, deque())
            q.append(now)
            while q and q[0] < now - FAILURE_WINDOW_S:
                q.popleft()
            if len(q) >= MAX_FAILURES:
                self._blocked_until[source] = now + BLOCK_S
                q.clear()


class Authenticator:
    def __init__(self, local_token: str, identity: IdentityStore) -> None:
        self.local_token = local_token
        self.identity = identity
        self.limiter = FailureLimiter()
        self.local_user = getpass.getuser()

    def caller(self, header: str | None, source: str) -> Caller:
        self.limiter.check(source)
        if token_matches(header, self.local_token):
            return Caller(self.local_user, admin=True, auth="local")
        found = None
        if header and header.startswith("Bearer "):
            found = self.identity.authenticate(header[7:].strip())
        if found is None:
            self.limiter.failed(source)
            raise AuthError("missing, wrong, expired or revoked API token")
        return found
