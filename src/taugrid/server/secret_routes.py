"""HTTP routes of /api/v1/secrets: set, list and delete local secrets. Never a value out.

``PUT /secrets/{ref}`` with ``{"value": str}`` -> 204; ``GET /secrets`` ->
``{"secrets": [{"ref", "updated_at"}]}``; ``DELETE /secrets/{ref}`` -> 204 (404 when
not set). References contain ``/`` (``hf/token``): the client sends them percent-encoded
and the path converter takes the rest of the path.

The request body is parsed here rather than declared as a pydantic model: FastAPI's
validation errors echo the offending input, which would put a value into the answer.
Every error names the problem, never the value. The store's calls block on fsync, so
they run in the thread pool.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from taugrid.errors import AuthError, NotFound, UsageError
from taugrid.executors.local.secrets import (
    MAX_VALUE_BYTES,
    LocalSecretStore,
    check_value,
)
from taugrid.server.auth import token_matches

# Generous for JSON escapes (a \uXXXX per character at worst); the value is checked after.
MAX_BODY_BYTES = 8 * MAX_VALUE_BYTES


def _require_token(request: Request) -> None:
    # The app includes routers behind the same check; secrets never rely on that alone.
    if not token_matches(request.headers.get("authorization"), request.app.state.token):
        raise AuthError("missing or wrong API token")


router = APIRouter(prefix="/api/v1", dependencies=[Depends(_require_token)], tags=["secrets"])


class SecretOut(BaseModel):
    ref: str
    updated_at: float


class SecretList(BaseModel):
    secrets: list[SecretOut]


def _store(request: Request) -> LocalSecretStore:
    store: LocalSecretStore = request.app.state.secrets
    return store


def _value_from(body: bytes) -> str:
    if len(body) > MAX_BODY_BYTES:
        raise UsageError(f"a secret value is at most {MAX_VALUE_BYTES // 1024} KiB")
    try:
        data = json.loads(body)
    except ValueError:
        raise UsageError('the body must be JSON: {"value": "..."}') from None
    if not isinstance(data, dict) or set(data) != {"value"}:
        raise UsageError('the body must be JSON: {"value": "..."}')
    return check_value(data["value"])


_PUT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"value": {"type": "string", "minLength": 1}},
                    "required": ["value"],
                    "additionalProperties": False,
                }
            }
        },
    }
}


@router.put("/secrets/{ref:path}", status_code=204, openapi_extra=_PUT_BODY)
async def put_secret(ref: str, request: Request) -> Response:
    """Set (or replace) a secret's value."""
    value = _value_from(await request.body())
    await run_in_threadpool(_store(request).set, ref, value)
    return Response(status_code=204)


@router.get("/secrets", response_model=SecretList)
def list_secrets(request: Request) -> SecretList:
    """Every secret's reference and when it was last set; never values."""
    return SecretList(
        secrets=[SecretOut(ref=e.ref, updated_at=e.updated_at) for e in _store(request).entries()]
    )


@router.delete("/secrets/{ref:path}", status_code=204)
def delete_secret(ref: str, request: Request) -> Response:
    """Delete a secret; 404 when it is not set."""
    if not _store(request).delete(ref):
        raise NotFound(f"secret {ref!r} is not set")
    return Response(status_code=204)
