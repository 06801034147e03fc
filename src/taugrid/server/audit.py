"""The audit log: every mutation, who asked, from where, and how it ended."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import Request

from taugrid.domain.access import Caller
from taugrid.errors import TauError
from taugrid.server.client_address import request_source
from taugrid.store.identity import IdentityStore

MAX_TARGET = 2000


@contextmanager
def audited(
    request: Request, action: str, *, target: str | None = None, workspace: str | None = None
) -> Iterator[dict[str, Any]]:
    """Record the mutation in the body: outcome ``ok``, or the error's code (``forbidden``,
    ``not_found``, ...). The body may fill in ``target``, ``workspace`` and ``detail``."""
    caller: Caller = request.state.caller
    entry: dict[str, Any] = {
        "actor": caller.user,
        "action": action,
        "target": target,
        "workspace": workspace,
        "source": request_source(request),  # behind a trusted proxy: the forwarded client
        "detail": None,
    }
    identity: IdentityStore = request.app.state.identity
    try:
        yield entry
    except TauError as exc:
        identity.audit(_clip({**entry, "outcome": exc.code, "detail": exc.message}))
        raise
    identity.audit(_clip({**entry, "outcome": "ok"}))


def _clip(entry: dict[str, Any]) -> dict[str, Any]:
    for key in ("target", "detail"):
        if isinstance(entry.get(key), str) and len(entry[key]) > MAX_TARGET:
            entry[key] = entry[key][:MAX_TARGET] + "..."
    return entry
