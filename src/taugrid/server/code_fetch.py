"""``GET /api/v1/snapshots/{digest}`` for cluster pods: the code snapshot, to the bearer
of that attempt's code token (``domain.code_tokens``), and to nobody else.

Not behind the API token: a pod holds no user's credentials, only the read-only,
expiring token its attempt's Secret carries, which names this one digest. A wrong,
expired or foreign token is a 401 whatever exists, so the answer says nothing about
other snapshots; the token is never logged.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from taugrid.domain.code_tokens import verify
from taugrid.errors import AuthError, NotFound
from taugrid.ports.artifacts import ArtifactStore
from taugrid.server.auth import ensure_token
from taugrid.server.safe_files import file_response

router = APIRouter(prefix="/api/v1")
_DIGEST = re.compile(r"[0-9a-f]{64}")


def code_key_path(home: Path) -> Path:
    """The key code tokens are signed with (0600 beside the local token)."""
    return home / "code-token.key"


def load_code_key(home: Path) -> bytes:
    """The server's code-token key, made on first start; every replica sharing the home
    (or, in a cluster, the mounted Secret at this path) checks the same tokens."""
    return ensure_token(code_key_path(home)).encode()


@router.get("/snapshots/{digest}", response_class=StreamingResponse)
def get_snapshot(digest: str, request: Request) -> StreamingResponse:
    header = request.headers.get("authorization") or ""
    token = header[7:].strip() if header.startswith("Bearer ") else ""
    key: bytes = request.app.state.code_key
    if not _DIGEST.fullmatch(digest) or verify(key, token, digest, time.time()) is None:
        raise AuthError("missing, wrong or expired code token for this snapshot")
    artifacts: ArtifactStore = request.app.state.artifacts
    if not artifacts.snapshot_exists(digest):
        raise NotFound(f"no code snapshot {digest[:12]} on this server")
    return file_response(artifacts.open_snapshot(digest))
