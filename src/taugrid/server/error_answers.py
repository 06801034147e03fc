"""Every error the API answers has the documented shape, and none repeats the request.

``{"error": {"code", "message"}}`` (plus ``"problems"`` for ``spec_invalid``), from:

- a :class:`~taugrid.errors.TauError`: its code, status and message;
- FastAPI's ``RequestValidationError``: 422 ``spec_invalid`` with one problem per field
  (``file`` says where: ``request body``, ``query``, ``path``, ``header``), or 400
  ``usage`` for a body that is not JSON. FastAPI's own answer lists each offending
  ``input`` (and ``ctx``): a secret sent in the wrong field would come straight back, so
  only the field path and pydantic's message are kept, and a message that quotes the
  input anyway (a custom validator's ``got 'x'``) has it cut out;
- Starlette's ``HTTPException`` (unknown path, wrong method, a body that cannot be
  parsed): the matching code;
- anything else: 500 ``internal`` with a reference that the server log repeats next to
  the traceback (:class:`taugrid.server.request_guard.RequestGuard` does it; the handler
  here is the last resort behind it); never the exception's text, which may hold
  request data.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from taugrid.errors import SpecError, SpecProblem, TauError, UsageError
from taugrid.server.request_guard import UNPARSABLE, internal_error

PageAnswer = Callable[[Request, TauError], Response | None]
WHERE = {"body": "request body", "query": "query", "path": "path", "header": "header"}
CODE_OF_STATUS = {
    400: "usage",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "usage",
    409: "conflict",
    413: "request_too_large",
    429: "rate_limited",
}
FASTAPI_UNPARSABLE = "There was an error parsing the body"  # e.g. RecursionError in json
REDACTED = "the value"
MIN_REDACT_CHARS = 4  # shorter inputs would match inside ordinary words of the message


def error_response(exc: TauError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": exc.to_dict()}, status_code=exc.http_status, headers=headers)


def field_path(loc: Iterable[Any]) -> str:
    """``("runs", 3, "resolved", "name")`` as ``runs[3].resolved.name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _redacted(message: str, value: Any) -> str:
    """``message`` without the input it may quote (defence in depth: pydantic's own
    messages never quote it; a custom validator's may)."""
    if isinstance(value, str | int | float | list | dict):
        for text in (repr(value), str(value)):  # the quoted form first
            if len(text) >= MIN_REDACT_CHARS and text in message:
                message = message.replace(text, REDACTED)
    return message


def safe_message(error: Mapping[str, Any]) -> str:
    """A pydantic error's message without the input it may quote."""
    return _redacted(str(error.get("msg", "invalid")), error.get("input"))


def validation_problems(errors: Iterable[Mapping[str, Any]]) -> list[SpecProblem]:
    problems = []
    for e in errors:
        loc = list(e.get("loc", ()))
        where = WHERE.get(str(loc[0]), str(loc[0])) if loc else "request"
        problems.append(SpecProblem(where, None, None, field_path(loc[1:]), safe_message(e)))
    return problems


def validation_error(exc: RequestValidationError) -> TauError:
    errors = list(exc.errors())
    bad_json = [e for e in errors if e.get("type") == "json_invalid"]
    if bad_json:
        ctx = bad_json[0].get("ctx") or {}
        reason = ctx.get("error") if isinstance(ctx.get("error"), str) else None
        loc = bad_json[0].get("loc", ())
        at = f" at character {loc[1]}" if len(loc) > 1 and isinstance(loc[1], int) else ""
        # json's reason ("Expecting ',' delimiter") names the grammar, not the content.
        because = f": {reason}" if reason else ""
        return UsageError(f"the request body is not valid JSON{because}{at}")
    return SpecError(validation_problems(errors))


def http_error(exc: HTTPException) -> TauError:
    code = CODE_OF_STATUS.get(exc.status_code, "usage" if exc.status_code < 500 else "internal")
    if exc.detail == FASTAPI_UNPARSABLE:  # its body could not be read or parsed
        message = UNPARSABLE
    elif isinstance(exc.detail, str) and exc.detail:
        message = exc.detail[:1].lower() + exc.detail[1:]
    else:
        message = f"HTTP {exc.status_code}"
    err = TauError(message)
    err.code = code
    err.http_status = exc.status_code
    return err


def install(app: FastAPI, pages: PageAnswer | None = None) -> None:
    """Register the handlers on the app (replacing FastAPI's defaults). ``pages`` may
    answer an error as a page instead (the portal's paths: the same code and message in
    HTML); it returns None for the paths it does not own."""

    def answer(
        request: Request, exc: TauError, headers: Mapping[str, str] | None = None
    ) -> Response:
        shown = pages(request, exc) if pages is not None else None
        return shown if shown is not None else error_response(exc, headers=headers)

    async def on_tau_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, TauError)
        return answer(request, exc)

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return answer(request, validation_error(exc))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return answer(request, http_error(exc), exc.headers)

    async def on_unhandled(request: Request, exc: Exception) -> JSONResponse:
        # Only what escapes RequestGuard gets here (Starlette logs it through uvicorn).
        return error_response(internal_error(secrets.token_hex(4)))

    app.add_exception_handler(TauError, on_tau_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unhandled)
