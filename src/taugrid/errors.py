"""The one error tree of TauGrid.

Every error a user can cause or meet derives from :class:`TauError`. Each class has a
stable ``code`` (used in API error bodies and ``-o json`` output) and the CLI exit code it
maps to. The CLI catches ``TauError`` once and prints one line; ``--debug`` shows the
traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


class TauError(Exception):
    code = "internal"
    exit_code = 1
    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class SpecProblem:
    """One problem in a spec, located as ``file:line:col`` (1-based) when known."""

    file: str
    line: int | None
    col: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}:{self.col or 1}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class SpecError(TauError):
    """A spec (tau.yaml, policy, overrides) is invalid; carries every problem found."""

    code = "spec_invalid"
    exit_code = 2
    http_status = 422

    def __init__(self, problems: list[SpecProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

    def to_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "message": self.message,
            "problems": [p.__dict__ for p in self.problems],
        }


class UsageError(TauError):
    """The request itself is malformed (bad flag combination, bad argument)."""

    code = "usage"
    exit_code = 2
    http_status = 400


class SnapshotTooLarge(TauError):
    code = "snapshot_too_large"
    exit_code = 2
    http_status = 413


class SnapshotInvalid(TauError):
    """An uploaded snapshot is not a safe tar.gz (a member leaves the workdir, a device...)."""

    code = "snapshot_invalid"
    exit_code = 2
    http_status = 422


class RequestTooLarge(TauError):
    """A request body over the server's limit for that endpoint."""

    code = "request_too_large"
    exit_code = 2
    http_status = 413


class IdempotencyKeyReused(TauError):
    """The caller already used this Idempotency-Key in this workspace for another request."""

    code = "idempotency_key_reused"
    exit_code = 2
    http_status = 422

    def __init__(self, message: str, index: int = 0) -> None:
        super().__init__(message)
        self.index = index  # which item of a batch


class ServerUnreachable(TauError):
    code = "server_unreachable"
    exit_code = 3
    http_status = 503


class AuthError(TauError):
    code = "unauthorized"
    exit_code = 4
    http_status = 401


class NotFound(TauError):
    code = "not_found"
    exit_code = 5
    http_status = 404


class Ambiguous(TauError):
    code = "ambiguous"
    exit_code = 6
    http_status = 409


class Conflict(TauError):
    """The request conflicts with the current state (e.g. cancelling a finished run)."""

    code = "conflict"
    exit_code = 7
    http_status = 409


class Unschedulable(TauError):
    """The run asks for more than this installation can ever give."""

    code = "unschedulable"
    exit_code = 8
    http_status = 422


class Forbidden(TauError):
    """The caller may see the object but not change it (e.g. another researcher's run)."""

    code = "forbidden"
    exit_code = 9
    http_status = 403


class RateLimited(TauError):
    """Too many failed authentications from one source; try again later."""

    code = "rate_limited"
    exit_code = 4
    http_status = 429


class DiskFull(TauError):
    """The disk holding TAU_HOME is (nearly) full: new work waits until space is freed."""

    code = "disk_full"
    exit_code = 10
    http_status = 507  # Insufficient Storage


class ClusterNotReady(TauError):
    """``tau admin cluster check`` found a check that failed (its lines say which, and the
    fix); the CLI's verdict, never an API answer."""

    code = "cluster_not_ready"
    exit_code = 11


ERRORS_BY_CODE: dict[str, type[TauError]] = {
    cls.code: cls
    for cls in (
        TauError,
        UsageError,
        SnapshotTooLarge,
        SnapshotInvalid,
        RequestTooLarge,
        IdempotencyKeyReused,
        ServerUnreachable,
        AuthError,
        NotFound,
        Ambiguous,
        Conflict,
        Unschedulable,
        Forbidden,
        RateLimited,
        DiskFull,
        ClusterNotReady,
    )
}
