"""Who is calling: the local token file (the machine's owner, an implicit admin), or an API
token from the identity store.

Failed attempts are rate limited per (source address, presented token id), and only
after the token was checked: a valid token is always accepted, so nobody at the same
address (behind one NAT or proxy, everyone) can lock its owner out by sending wrong
secrets for its id.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from taugrid.domain.access import Caller
from taugrid.errors import AuthError, RateLimited
from taugrid.osuser import current_user
from taugrid.store.identity import IdentityStore, parse_token

MAX_FAILURES = 10  # per (source, token id), within FAILURE_WINDOW_S, before it is blocked
FAILURE_WINDOW_S = 60.0
BLOCK_S = 60.0
# Memory stays bounded whatever an attacker sends: at most this many (source, id) pairs
# are tracked (the least recently failed are forgotten first), each with at most
# MAX_FAILURES times. Forgetting a pair only lets it fail a few more times: the limiter
# never decides who is let in, the token check does.
MAX_TRACKED = 10_000
NO_TOKEN_ID = "-"  # the bucket of headers without a tau_<id>_ token (or none at all)

Key = tuple[str, str]
V = TypeVar("V")


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


def presented_token_id(header: str | None) -> str:
    """The public id of a ``Bearer tau_<id>_<secret>`` header; one shared bucket for
    anything else (the local token, garbage, no header)."""
    if header and header.startswith("Bearer "):
        parsed = parse_token(header[7:].strip())
        if parsed is not None:
            return parsed[0]
    return NO_TOKEN_ID


class FailureLimiter:
    """Counts failed authentications per key; a key that failed ``max_failures`` times
    within ``window_s`` is blocked for ``block_s``. Both tables are capped at
    ``max_tracked`` keys, least recently touched out first."""

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        window_s: float = FAILURE_WINDOW_S,
        block_s: float = BLOCK_S,
        max_tracked: int = MAX_TRACKED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.block_s = block_s
        self.max_tracked = max_tracked
        self.clock = clock
        self._fails: OrderedDict[Key, deque[float]] = OrderedDict()
        self._blocked_until: OrderedDict[Key, float] = OrderedDict()
        self._lock = threading.Lock()

    def blocked_for(self, key: Key) -> float:
        """Seconds the key stays blocked; 0 when it is not."""
        now = self.clock()
        with self._lock:
            until = self._blocked_until.get(key)
            if until is None:
                return 0.0
            if until <= now:
                del self._blocked_until[key]
                return 0.0
            return until - now

    def failed(self, key: Key) -> None:
        now = self.clock()
        with self._lock:
            times = self._fails.pop(key, None)
            if times is None:
                times = deque(maxlen=self.max_failures)
            times.append(now)
            if len(times) == self.max_failures and times[0] > now - self.window_s:
                self._blocked_until.pop(key, None)
                self._blocked_until[key] = now + self.block_s
                _trim(self._blocked_until, self.max_tracked)
                return  # the block starts afresh: old failures are not carried over
            self._fails[key] = times  # re-inserted: now the most recent
            _trim(self._fails, self.max_tracked)

    def tracked(self) -> int:
        """How many keys the tables hold (for tests of the memory bound)."""
        with self._lock:
            return len(self._fails) + len(self._blocked_until)


def _trim(table: OrderedDict[Key, V], cap: int) -> None:
    while len(table) > cap:
        table.popitem(last=False)


class Authenticator:
    def __init__(self, local_token: str, identity: IdentityStore) -> None:
        self.local_token = local_token
        self.identity = identity
        self.limiter = FailureLimiter()
        self.local_user = current_user()

    def local_caller(self, header: str | None) -> Caller | None:
        """The machine's owner if the header holds the local token (no I/O); else None."""
        if token_matches(header, self.local_token):
            return self.owner()
        return None

    def owner(self) -> Caller:
        """The machine's owner: the local token, or a portal session signed with it."""
        return Caller(self.local_user, admin=True, auth="local")

    def caller(self, header: str | None, source: str) -> Caller:
        """The caller a header stands for; AuthError (401) or, for a (source, token id)
        that failed too often, RateLimited (429). The token is checked first."""
        local = self.local_caller(header)
        if local is not None:
            return local
        if header and header.startswith("Bearer "):
            found = self.identity.authenticate(header[7:].strip())
            if found is not None:
                return found
        key = (source, presented_token_id(header))
        wait = self.limiter.blocked_for(key)
        if wait > 0:
            raise RateLimited(
                f"too many failed authentications with this token from your address; "
                f"try again in {wait:.0f}s"
            )
        self.limiter.failed(key)
        raise AuthError("missing, wrong, expired or revoked API token")
