"""Client of the server's /api/v1, on :mod:`taugrid.cli.wire` so read commands start fast.

Errors come back as the server's ``{"error": {"code", "message"}}`` and are raised as
the matching :class:`~taugrid.errors.TauError` subclass.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from taugrid.cli import wire
from taugrid.errors import ERRORS_BY_CODE, AuthError, ServerUnreachable, TauError

Params = Mapping[str, str | int | float | bool | list[str] | None]


class Client:
    def __init__(self, base_url: str, token: str | None, timeout: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        self.base_url = base_url.rstrip("/")
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.https = parsed.scheme == "https"
        self.token = token
        self.timeout = timeout

    # -- plumbing -----------------------------------------------------------------------
    def send(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json_body: Any = None,
        body: bytes | BinaryIO | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = -1.0,
        progress: Callable[[int], None] | None = None,
    ) -> wire.Response:
        """Send a request; the caller reads (or streams) the response and closes it.
        ``progress`` is told how much of a file ``body`` has been sent."""
        url = path if path.startswith("/healthz") else "/api/v1" + path
        if params:
            query = [(k, v) for k, v in _flat(params) if v is not None]
            if query:
                url += "?" + urllib.parse.urlencode(query, doseq=True)
        hdrs = {"Accept": "application/json", **(headers or {})}
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        try:
            resp = wire.request(
                self.host,
                self.port,
                method,
                url,
                headers=hdrs,
                body=body,
                timeout=self.timeout if timeout == -1.0 else timeout,
                https=self.https,
                progress=progress,
            )
        except OSError as exc:
            raise ServerUnreachable(
                f"cannot reach the tau server at {self.base_url}: {exc}"
            ) from exc
        if resp.status >= 400:
            data = resp.read()
            resp.close()
            raise _error_from(resp.status, data)
        return resp

    def call(self, method: str, path: str, **kw: Any) -> Any:
        resp = self.send(method, path, **kw)
        try:
            data = resp.read()
        finally:
            resp.close()
        return json.loads(data) if data else None

    def stream(self, path: str, params: Params | None = None) -> Iterator[bytes]:
        resp = self.send("GET", path, params=params, timeout=None)
        try:
            yield from resp.iter_bytes()
        finally:
            resp.close()

    # -- API ----------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self.call("GET", "/healthz", timeout=2.0)
        return result

    def get_run(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call("GET", f"/runs/{_q(ref)}")
        return result

    def list_runs(self, **params: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.call("GET", "/runs", params=params)
        return result

    def cancel(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call("POST", f"/runs/{_q(ref)}/cancel")
        return result

    def cancel_many(self, refs: list[str]) -> list[dict[str, Any]]:
        """One request, one durable commit; a result (``run`` or ``error``) per ref."""
        body: dict[str, Any] = self.call("POST", "/runs/cancel", json_body={"runs": refs})
        return list(body["results"])

    def has_snapshot(self, digest: str, workspace: str) -> bool:
        """Whether ``workspace`` has this snapshot (the server answers for the
        workspaces the caller can read only)."""
        try:
            self.call("HEAD", f"/snapshots/{digest}", params={"workspace": workspace})
        except TauError as exc:
            if exc.code == "not_found":
                return False
            raise
        return True

    def put_snapshot(
        self,
        digest: str,
        archive: Path,
        workspace: str,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Upload the archive file for ``workspace``, streamed from disk; ``progress``
        is told the bytes sent so far as they go."""
        with archive.open("rb") as f:
            self.call(
                "PUT",
                f"/snapshots/{digest}",
                params={"workspace": workspace},
                body=f,
                headers={"Content-Type": "application/gzip"},
                progress=progress,
            )

    def submit(self, payload: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        # A retry after a lost answer reuses the key, so the run is recorded once.
        for attempt in range(3):
            try:
                result: dict[str, Any] = self.call(
                    "POST", "/runs", json_body=payload, headers={"Idempotency-Key": idempotency_key}
                )
                return result
            except ServerUnreachable:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def artifacts(self, ref: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call("GET", f"/runs/{_q(ref)}/artifacts")
        return result

    def checkpoints(self, ref: str) -> dict[str, Any]:
        """``{"run_id", "checkpoints": [...]}``, newest step first, each with its files."""
        result: dict[str, Any] = self.call("GET", f"/runs/{_q(ref)}/checkpoints")
        return result

    def checkpoint_file(self, ref: str, step: int, path: str) -> Iterator[bytes]:
        """One file of a checkpoint, streamed (NotFound when absent)."""
        quoted = urllib.parse.quote(path, safe="/")
        return self.stream(f"/runs/{_q(ref)}/checkpoints/{int(step)}/files/{quoted}")

    def metrics(self, ref: str, attempt: int | None = None) -> dict[str, Any]:
        """``{"run_id", "series": [{"attempt", "step", "time", "values"}]}`` in order."""
        result: dict[str, Any] = self.call(
            "GET", f"/runs/{_q(ref)}/metrics", params={"attempt": attempt}
        )
        return result

    def resume(self, ref: str) -> dict[str, Any]:
        """Queue a finished run again as a new attempt; Conflict unless it has finished."""
        result: dict[str, Any] = self.call("POST", f"/runs/{_q(ref)}/resume")
        return result

    # -- secrets (values go in, never come out) ------------------------------------------
    def put_secret(
        self, ref: str, value: str, *, workspace: str | None = None, personal: bool = False
    ) -> None:
        """Set a secret of ``workspace`` (the server's ``default`` when None), or the
        caller's personal one there; the value travels in the body, never in the URL."""
        self.call(
            "PUT",
            f"/secrets/{_q(ref)}",
            params=_secret_params(workspace, personal),
            json_body={"value": value},
        )

    def list_secrets(self, *, workspace: str | None = None) -> dict[str, Any]:
        """``{"workspace", "secrets": [{"ref", "scope", "owner", "updated_at"}]}``: the
        workspace's and the caller's personal ones; names and times, no values."""
        result: dict[str, Any] = self.call(
            "GET", "/secrets", params=_secret_params(workspace, False)
        )
        return result

    def delete_secret(
        self, ref: str, *, workspace: str | None = None, personal: bool = False
    ) -> None:
        """Delete a secret; NotFound when it is not set."""
        self.call("DELETE", f"/secrets/{_q(ref)}", params=_secret_params(workspace, personal))

    # -- admin: identity and access (an admin's token; others get NotFound) -------------
    # The DELETEs answer 204 without a body: call() returns None for an empty body.
    def create_workspace(self, name: str) -> dict[str, Any]:
        """``{"name", "created_at", "members": {}}``."""
        result: dict[str, Any] = self.call("POST", "/admin/workspaces", json_body={"name": name})
        return result

    def list_workspaces(self) -> dict[str, Any]:
        """``{"workspaces": [{"name", "created_at", "members": {user: role}}]}``."""
        result: dict[str, Any] = self.call("GET", "/admin/workspaces")
        return result

    def delete_workspace(self, name: str) -> None:
        """Conflict while the workspace has unfinished runs."""
        self.call("DELETE", f"/admin/workspaces/{_q(name)}")

    def set_member(self, workspace: str, user: str, role: str) -> dict[str, Any]:
        """Add a member or change their role: ``{"workspace", "user", "role"}``."""
        result: dict[str, Any] = self.call(
            "PUT",
            f"/admin/workspaces/{_q(workspace)}/members/{_q(user)}",
            json_body={"role": role},
        )
        return result

    def remove_member(self, workspace: str, user: str) -> None:
        self.call("DELETE", f"/admin/workspaces/{_q(workspace)}/members/{_q(user)}")

    def create_user(self, name: str, kind: str = "user", admin: bool = False) -> dict[str, Any]:
        """``kind`` is ``user`` or ``service``; answers the user."""
        result: dict[str, Any] = self.call(
            "POST", "/admin/users", json_body={"name": name, "kind": kind, "admin": admin}
        )
        return result

    def list_users(self) -> dict[str, Any]:
        """``{"users": [{"name", "kind", "admin", "disabled", "created_at", "memberships"}]}``."""
        result: dict[str, Any] = self.call("GET", "/admin/users")
        return result

    def disable_user(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.call("POST", f"/admin/users/{_q(name)}/disable")
        return result

    def create_token(
        self, user: str, name: str | None = None, expires_in_s: float | None = None
    ) -> dict[str, Any]:
        """``{"id", "user", "name", "created_at", "expires_at", "token"}``: the only answer
        that carries the secret ``token``."""
        result: dict[str, Any] = self.call(
            "POST",
            "/admin/tokens",
            json_body={"user": user, "name": name, "expires_in_s": expires_in_s},
        )
        return result

    def list_tokens(self, user: str | None = None) -> dict[str, Any]:
        """``{"tokens": [{"id", "user", "name", "created_at", "expires_at", "revoked_at",
        "last_used_at"}]}`` (never the secrets)."""
        result: dict[str, Any] = self.call("GET", "/admin/tokens", params={"user": user})
        return result

    def revoke_token(self, token_id: str) -> None:
        self.call("DELETE", f"/admin/tokens/{_q(str(token_id))}")

    def audit(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        workspace: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """``{"entries": [{"id", "at", "actor", "action", "target", "workspace", "source",
        "outcome", "detail"}]}``, newest first; ``since``/``until`` in unix seconds."""
        params = {
            "actor": actor,
            "action": action,
            "workspace": workspace,
            "since": since,
            "until": until,
            "limit": limit,
        }
        result: dict[str, Any] = self.call("GET", "/admin/audit", params=params)
        return result


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _flat(params: Params) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in params.items():
        if isinstance(v, list):
            out += [(k, x) for x in v]
        elif isinstance(v, bool):
            out.append((k, "true" if v else "false"))
        else:
            out.append((k, v))
    return out


def _error_from(status: int, data: bytes) -> TauError:
    try:
        err = json.loads(data)["error"]
        cls = ERRORS_BY_CODE.get(err["code"], TauError)
        if err["code"] == "spec_invalid":
            from taugrid.errors import SpecError, SpecProblem

            return SpecError([SpecProblem(**p) for p in err.get("problems", [])])
        exc = cls.__new__(cls)
        TauError.__init__(exc, err["message"])
        return exc
    except (ValueError, KeyError, TypeError):
        if status == 401:
            return AuthError("the server refused the API token")
        if status == 404:
            return ERRORS_BY_CODE["not_found"]("not found")
        if status == 413:  # a proxy in front of the server, say
            return ERRORS_BY_CODE["request_too_large"](
                "the server refused the request as too large"
            )
        return TauError(f"server answered HTTP {status}: {data[:200]!r}")


def _secret_params(workspace: str | None, personal: bool) -> dict[str, str | None]:
    return {"workspace": workspace, "scope": "personal" if personal else None}
