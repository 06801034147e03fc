"""A size limit on a JSON request body, enforced while it is read.

FastAPI reads a whole body into memory and parses it before the route runs; a route of
:func:`body_limited` reads it first, at most ``max_bytes`` (a declared ``Content-Length``
over the limit is refused before anything is read), and answers 413
``request_too_large`` in the API's error shape. FastAPI then parses the body it was
handed. (Starlette's own ``max_body_size`` answers in plain text, outside the error tree.)
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

from fastapi import Request, Response
from fastapi.routing import APIRoute

from taugrid.errors import RequestTooLarge


class BodyLimitedRoute(APIRoute):
    max_body_bytes: ClassVar[int]

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        parse_and_run = super().get_route_handler()
        limit = self.max_body_bytes

        async def handler(request: Request) -> Response:
            await read_body(request, limit)  # cached on the request for FastAPI to parse
            return await parse_and_run(request)

        return handler


def body_limited(max_bytes: int) -> type[APIRoute]:
    """A route class for ``APIRouter.add_api_route(route_class_override=...)``."""
    return type(f"BodyLimited{max_bytes}", (BodyLimitedRoute,), {"max_body_bytes": max_bytes})


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLarge(_message(limit))
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(_message(limit))
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # what Request.body() returns from now on
    return body


def _message(limit: int) -> str:
    return f"request body is over this endpoint's {limit / 2**20:.0f} MiB limit"


def limited_route(
    router: Any, method: str, path: str, max_bytes: int, **kwargs: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``@router.post(path, ...)`` with a body limit."""

    def register(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        router.add_api_route(
            path,
            endpoint,
            methods=[method],
            route_class_override=body_limited(max_bytes),
            **kwargs,
        )
        return endpoint

    return register
