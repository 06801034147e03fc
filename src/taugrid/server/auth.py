"""Local-mode auth: one bearer token in a 0600 file, checked in constant time."""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
from pathlib import Path


def ensure_token(path: Path) -> str:
    """Read the token, creating it (mode 0600, atomically) on first start."""
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
