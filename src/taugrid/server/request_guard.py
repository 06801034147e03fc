"""One cheap guard in front of every route: bounded JSON bodies, and a JSON answer (never
a traceback, never Starlette's plain-text 500) when a route fails unexpectedly.

Every JSON body the API accepts is a flat record a few levels deep; the deepest is a
batch submission (``runs[i].resolved.resources...``, under ten levels). A body nested
thousands of levels deep exists only to break something: the parser's recursion, the
validator, a serializer writing it to the database, or every later answer that shows
it. Bodies are therefore refused, with a 4xx JSON error and without echoing them:

- over ``MAX_JSON_BODY_BYTES`` (a JSON content type only: snapshots are uploaded as
  ``application/gzip`` and have their own limit) by :class:`RequestGuard`, which answers
  413 from ``Content-Length`` before reading anything, or stops reading a chunked body
  as soon as it passes the limit;
- deeper than ``MAX_JSON_DEPTH`` by :func:`bounded_json`, a router dependency that runs
  after FastAPI parsed the body (Starlette caches the parsed value on the request, so it
  is parsed once) and before the body is validated. A body too deep for the parser itself
  (about a thousand levels) fails parsing, which FastAPI answers 400 and
  :mod:`taugrid.server.error_answers` turns into the documented error.

An exception no handler took reaches :class:`RequestGuard` (it sits outside FastAPI's
exception handlers and inside Starlette's last-resort one, which would answer plain text
and re-raise): it is logged once, with its traceback and a reference, and answered as
``{"error": {"code": "internal", ...}}`` with that reference.

:class:`RequestGuard` is a plain ASGI wrapper (a header scan per request), not a Starlette
``BaseHTTPMiddleware``, whose per-request cost is what the app avoids; docs/api.md has
the measurement.
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

from fastapi import Request
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taugrid.errors import RequestTooLarge, TauError, UsageError

log = logging.getLogger("taugrid.server")

MAX_JSON_DEPTH = 64
MAX_JSON_BODY_BYTES = 64 << 20  # a batch of 1,000 runs with their records fits easily
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CONTAINERS = (dict, list)
TOO_LARGE = f"the request body is over {MAX_JSON_BODY_BYTES >> 20} MiB of JSON"
TOO_DEEP = f"the request body is nested deeper than {MAX_JSON_DEPTH} levels"
UNPARSABLE = "the request body is not valid JSON, or is nested too deeply"


def is_json_type(content_type: str | None) -> bool:
    """``application/json`` or ``application/<anything>+json`` (parameters ignored)."""
    if not content_type:
        return False
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def json_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed JSON value nests lists and objects deeper than ``limit``.

    Level by level, not recursive (a deep value must not exhaust the stack here either);
    ``type(...) in`` rather than ``isinstance``: a parsed JSON value holds exactly dicts
    and lists, and this is the hot loop (about 25 us for a submission with a few hundred
    packages in its environment record, 28 ms for a batch of 1,000 of them).
    """
    level = [value] if type(value) in CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            below += [c for c in children if type(c) in CONTAINERS]
        level = below
    return False


async def bounded_json(request: Request) -> None:
    """Router dependency: a JSON body nested too deeply is a 400 before any route or
    validator sees it."""
    if request.method not in BODY_METHODS or not is_json_type(request.headers.get("content-type")):
        return
    if not await request.body():
        return
    try:
        value = await request.json()  # parsed already when the route declares a body
    except (ValueError, RecursionError):
        raise UsageError(UNPARSABLE) from None
    if json_too_deep(value):
        raise UsageError(TOO_DEEP)


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a chunked JSON body passes the limit: FastAPI lets an
    HTTPException out of its body reading as it is (any other error becomes a 400)."""

    def __init__(self) -> None:
        super().__init__(status_code=413, detail=TOO_LARGE)


class RequestGuard:
    """ASGI wrapper: JSON bodies over ``max_json_bytes`` are refused; an unhandled
    exception becomes the documented 500 (see the module)."""

    def __init__(self, app: ASGIApp, max_json_bytes: int = MAX_JSON_BODY_BYTES) -> None:
        self.app = app
        self.max_json_bytes = max_json_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] in BODY_METHODS:
            content_type = length = None
            for name, value in scope["headers"]:
                if name == b"content-type":
                    content_type = value.decode("latin-1")
                elif name == b"content-length":
                    length = value
            if is_json_type(content_type):
                if length is not None and length.isdigit() and int(length) > self.max_json_bytes:
                    await _answer(send, RequestTooLarge(TOO_LARGE), close=True)
                    return
                receive = _counting(receive, self.max_json_bytes)
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            if started:  # too late for an answer: the server aborts the connection
                raise
            ref = secrets.token_hex(4)
            log.error(
                "internal error %s in %s %s", ref, scope["method"], scope["path"], exc_info=exc
            )
            await _answer(send, internal_error(ref))


def internal_error(ref: str) -> TauError:
    return TauError(f"internal server error (reference {ref}; the server log has the details)")


def _counting(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge()
        return message

    return counted


async def _answer(send: Send, error: TauError, *, close: bool = False) -> None:
    body = json.dumps({"error": error.to_dict()}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))  # the unread body is not drained
    await send({"type": "http.response.start", "status": error.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
