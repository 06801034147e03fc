"""Per-attempt code tokens: what lets a cluster pod's init container fetch its run's code
snapshot, and nothing else. Pure (stdlib hmac; the key and the clock are arguments).

A token is ``tau-code.<claims>.<mac>``: the claims (digest, run, attempt, expiry) in
URL-safe base64 JSON, and an HMAC-SHA256 of them under the server's key. It is
read-only (it names one snapshot), expiring (``ttl``) and stateless: the server keeps
no table of tokens, so a restarted server (or another replica with the same key)
checks it as well. It is not an API token: it reaches no other route.

A report token (``tau-report.<claims>.<mac>``) is its write-only sibling: it lets the
attempt's reporting sidecar append that attempt's metrics and say which checkpoints it
sees (``server.pod_reports``), and nothing else. The prefix is inside the signed text,
so neither kind of token passes for the other.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

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


def _sign(key: bytes, prefix: str, body: dict[str, Any]) -> str:
    claims = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    return f"{prefix}{claims}.{_mac(key, prefix + claims)}"


def _open(key: bytes, prefix: str, token: str, now: float) -> dict[str, Any] | None:
    """The claims of an unexpired ``prefix`` token signed with ``key``; else None."""
    if not token.startswith(prefix):
        return None
    claims, _, mac = token[len(prefix) :].partition(".")
    if not claims or not mac or not hmac.compare_digest(mac, _mac(key, prefix + claims)):
        return None
    try:
        body = json.loads(_unb64(claims))
        if not isinstance(body, dict) or float(body["exp"]) <= now:
            return None
    except (ValueError, KeyError, TypeError):
        return None
    return body


def issue(
    key: bytes, digest: str, run_id: str, attempt: int, now: float, ttl_s: float = DEFAULT_TTL_S
) -> str:
    return _sign(key, PREFIX, {"d": digest, "r": run_id, "a": attempt, "exp": int(now + ttl_s)})


def verify(key: bytes, token: str, digest: str, now: float) -> CodeClaims | None:
    """The claims when ``token`` is ours, unexpired and names ``digest``; else None."""
    body = _open(key, PREFIX, token, now)
    if body is None:
        return None
    try:
        found = CodeClaims(str(body["d"]), str(body["r"]), int(body["a"]), float(body["exp"]))
    except (ValueError, KeyError, TypeError):
        return None
    return found if hmac.compare_digest(found.digest, digest) else None


REPORT_PREFIX = "tau-report."


def issue_report(key: bytes, run_id: str, attempt: int, now: float, ttl_s: float) -> str:
    """The attempt's report token (it must outlive the attempt: ``ttl_s`` from launch)."""
    return _sign(key, REPORT_PREFIX, {"r": run_id, "a": attempt, "exp": int(now + ttl_s)})


def verify_report(key: bytes, token: str, run_id: str, attempt: int, now: float) -> bool:
    """Whether ``token`` is ours, unexpired, and names exactly this run's attempt."""
    body = _open(key, REPORT_PREFIX, token, now)
    return body is not None and body.get("r") == run_id and body.get("a") == attempt
