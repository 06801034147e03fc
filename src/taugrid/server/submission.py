"""Checks of a submission that need no state: limits, the spec hash, the idempotency key.

The limits themselves are in :mod:`taugrid.domain.submit_limits`; this turns their
problems into the API's errors (a 422 :class:`SpecError` with field paths; the header is
a 400 :class:`UsageError`), never echoing a value.
"""

from __future__ import annotations

import re

from taugrid.domain.fingerprint import spec_hash
from taugrid.domain.submit_limits import (
    IDEMPOTENCY_KEY_PATTERN,
    MAX_TEXT_BYTES,
    submission_problems,
)
from taugrid.errors import SpecError, SpecProblem, UsageError
from taugrid.server.schemas import SubmitRequest

_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_PLAIN_SOURCE = re.compile(r"^[^\x00-\x1f\x7f-\x9f\ud800-\udfff]*$")


def check_limits(req: SubmitRequest) -> None:
    """Raises :class:`SpecError` listing each limit broken. Checked before the spec models
    look at the request, so 20,000 env keys cost one line, not one per key."""
    source = _source(req.spec_source)
    problems = submission_problems(
        resolved=req.resolved,
        spec_source=req.spec_source,
        file_text=req.file_text,
        overrides=req.overrides,
        submitter=req.submitter,
        env=req.env,
        code=req.code,
        python_env=req.python_env,
        rerun_of=req.rerun_of,
    )
    if problems:
        raise SpecError([SpecProblem(source, None, None, f, m) for f, m in problems])


def checked_spec_hash(req: SubmitRequest) -> str:
    """The server's own hash of ``req.resolved``; a ``spec_hash`` the client sent must be
    the same (else :class:`SpecError`): it is what the run records."""
    digest = spec_hash(req.resolved)
    if req.spec_hash is not None and req.spec_hash != digest:
        raise SpecError(
            [
                SpecProblem(
                    _source(req.spec_source),
                    None,
                    None,
                    "request.spec_hash",
                    "is not the sha256 of the canonical JSON of `resolved` (sorted keys, "
                    "no spaces, UTF-8); send that hash, or none",
                )
            ]
        )
    return digest


def check_idempotency_key(key: str | None) -> None:
    if key is not None and not _KEY.match(key):
        raise UsageError(
            "Idempotency-Key must be 1 to 128 printable ASCII characters without spaces "
            "(a UUID, for example)"
        )


def _source(spec_source: str) -> str:
    """Where problems are reported: the spec's source, unless it is itself unfit to show."""
    if len(spec_source) <= MAX_TEXT_BYTES and _PLAIN_SOURCE.match(spec_source):
        return spec_source
    return "<request>"
