"""Per-attempt code tokens: what lets a cluster pod's init container fetch its run's code
snapshot, and nothing else. Pure (stdlib hmac; the key and the clock are arguments).

A token is ``tau-code.<claims>.<mac>``: the claims (digest, run, attempt, expiry) in
URL-safe base64 JSON, and an HMAC-SHA256 of them under the server's key. It is
read-only (it names one snapshot), expiring (``ttl``) and stateless: the server keeps
no table of tokens, so a restarted server (or another replica with the same key)
checks it as well. It is not an API token: it reaches no other route.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass

PREFIX = "tau-code."
DEFAULT_TTL_S = 6 * 3600.0  # a pod waits at most this long between launch and start


@dataclass(frozen=True)
class CodeClaims:
    digest: str
    run_id: str
    attempt: int
    expires_at: float


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, claims: str) -> str:
    return _b64(hmac.new(key, claims.encode(), hashlib.sha256).digest())


def issue(
    key: bytes, digest: str, run_id: str, attempt: int, now: float, ttl_s: float = DEFAULT_TTL_S
) -> str:
    body = {"d": digest, "r": run_id, "a": attempt, "exp": int(now + ttl_s)}
    claims = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    return f"{PREFIX}{claims}.{_mac(key, claims)}"


def verify(key: bytes, token: str, digest: str, now: float) -> CodeClaims | None:
    """The claims when ``token`` is ours, unexpired and names ``digest``; else None."""
    if not token.startswith(PREFIX):
        return None
    claims, _, mac = token[len(PREFIX) :].partition(".")
    if not claims or not mac or not hmac.compare_digest(mac, _mac(key, claims)):
        return None
    try:
        body = json.loads(_unb64(claims))
        found = CodeClaims(str(body["d"]), str(body["r"]), int(body["a"]), float(body["exp"]))
    except (ValueError, KeyError, TypeError):
        return None
    if found.expires_at <= now or not hmac.compare_digest(found.digest, digest):
        return None
    return found
