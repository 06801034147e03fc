"""Log in to a tau server and save it as a context.

The token is checked with the server (GET /api/v1/whoami) before anything is written;
then the server, the token and the default workspace are saved as a context, readable by
you alone, in ~/.config/tau/config.yaml, and that context becomes the current one. The
token is never an argument: command lines are visible to every user (ps).

\b
  tau login https://gpu-box.lab:8443           prompts for the token
  printf %s "$TOKEN" | tau login https://gpu-box.lab:8443 --token-stdin
  tau login URL --token-env LAB_TOKEN --name lab --workspace vision
  tau login URL --oidc                         signs in through a browser (OIDC)
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.parse
from typing import Any

import click

from taugrid.cli import contexts
from taugrid.cli.client import Client
from taugrid.errors import AuthError, NotFound, ServerUnreachable, TauError, UsageError
from taugrid.net import is_loopback_host

NO_TOKEN_ARGUMENT = (
    "tau login takes no token argument: command lines are visible to every user (ps). "
    "Type it at the prompt, pipe it with --token-stdin, or use --token-env VAR"
)


@click.command(
    name="login",
    help=__doc__,
    # Extra arguments reach ctx.args instead of click's error, which would repeat them.
    context_settings={"allow_extra_args": True},
)
@click.argument("url")
@click.option("--token-stdin", is_flag=True, help="Read the token from stdin.")
@click.option("--token-env", metavar="VAR", help="Take the token from this environment variable.")
@click.option(
    "--oidc", is_flag=True, help="Sign in in a browser through the server's OIDC provider."
)
@click.option(
    "--name", metavar="NAME", help="Name of the context (default: the server's host name)."
)
@click.option(
    "--workspace", metavar="WORKSPACE", help="Default workspace of commands in this context."
)
@click.pass_context
def command(
    ctx: click.Context,
    url: str,
    token_stdin: bool,
    token_env: str | None,
    oidc: bool,
    name: str | None,
    workspace: str | None,
) -> None:
    if ctx.args:
        raise UsageError(NO_TOKEN_ARGUMENT)
    server = contexts.check_server(url)
    name = context_name(server, name)
    existing = contexts.load().get(name)  # an unreadable config fails before the prompt
    if workspace is None and existing is not None and existing.server == server:
        workspace = existing.workspace  # logging in again keeps the default workspace
    warn_if_cleartext(server)
    if oidc and (token_stdin or token_env is not None):
        raise UsageError("--oidc excludes --token-stdin and --token-env")
    token = oidc_token(server) if oidc else read_token(server, token_stdin, token_env)
    identity = whoami(server, token)
    _check_workspace(identity, workspace)
    contexts.save_context(contexts.Context(name, server, token, workspace))
    click.echo(f"logged in to {server} as {identity['user']} (context {name})")
    if existing is not None and existing.server != server:
        click.echo(f"note: context {name} pointed to {existing.server} before", err=True)
    var = contexts.overriding_variable()
    if var is not None:
        click.echo(f"note: {var} is set and takes precedence in this shell", err=True)


def context_name(server: str, name: str | None) -> str:
    if name is None:
        name = urllib.parse.urlsplit(server).hostname or ""
        if not contexts.NAME_RE.fullmatch(name) or name == contexts.LOCAL:
            raise UsageError(f"cannot name a context after the host {name!r}; use --name NAME")
    if name == contexts.LOCAL:
        raise UsageError("the context 'local' is built in; choose another --name")
    return contexts.check_name(name)


def read_token(server: str, from_stdin: bool, from_env: str | None) -> str:
    """The token from ``$from_env``, stdin, or a no-echo prompt on a terminal."""
    if from_stdin and from_env is not None:
        raise UsageError("--token-stdin and --token-env exclude each other")
    if from_env is not None:
        if from_env not in os.environ:
            raise UsageError(f"--token-env: the environment variable {from_env} is not set")
        token = os.environ[from_env]
    elif from_stdin:
        if sys.stdin is None:
            raise UsageError("--token-stdin: stdin is closed")
        token = sys.stdin.read()
    elif sys.stdin is not None and sys.stdin.isatty():
        import getpass

        token = getpass.getpass(f"API token for {server} (not echoed): ")
    else:
        raise UsageError(
            "no token: stdin is not a terminal to prompt on; use --token-stdin or --token-env VAR"
        )
    token = token.strip()
    if not token:
        raise UsageError("no token: it is empty")
    return contexts.check_token(token)


def oidc_token(server: str) -> str:
    """An API token through the server's device flow (RFC 8628): print where to sign in,
    then poll until the browser sign-in is done, refused or expired (Ctrl-C aborts)."""
    client = Client(server, None, timeout=15.0)
    try:
        start = client.call("POST", "/auth/device")
    except NotFound as exc:
        raise UsageError(f"{server} offers no OIDC login: {exc.message}") from exc
    if not isinstance(start, dict) or not isinstance(start.get("device_code"), str):
        raise TauError(f"{server} answered /api/v1/auth/device with something else")
    click.echo(
        f"Open {start['verification_uri_complete']} and sign in (code {start['user_code']})",
        err=True,
    )
    interval = max(1.0, float(start.get("interval") or 5))
    deadline = time.monotonic() + float(start.get("expires_in") or 600)
    body = json.dumps({"device_code": start["device_code"]}).encode()
    while True:
        status, answer = _post(client, "/api/v1/auth/device/token", body)
        if status == 200 and isinstance(answer.get("token"), str):
            return contexts.check_token(answer["token"])
        raw = answer.get("error")
        err: dict[str, Any] = raw if isinstance(raw, dict) else {}
        code, message = err.get("code"), err.get("message") or f"HTTP {status}"
        if code == "slow_down":
            interval += 1
        elif code != "authorization_pending":
            raise AuthError(f"OIDC login failed: {code or 'error'}: {message}")
        if time.monotonic() + interval > deadline:
            raise AuthError("OIDC login failed: the code expired; run tau login again")
        time.sleep(interval)


def _post(client: Client, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST JSON and return the status with the JSON body, errors included (their
    ``code`` matters here, and the client maps unknown codes to a generic error)."""
    from taugrid.cli import wire

    try:
        resp = wire.request(
            client.host,
            client.port,
            "POST",
            path,
            headers={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            timeout=client.timeout,
            https=client.https,
        )
        try:
            data = resp.read()
        finally:
            resp.close()
    except OSError as exc:
        raise ServerUnreachable(f"cannot reach the tau server at {client.base_url}: {exc}") from exc
    try:
        answer = json.loads(data) if data else {}
    except ValueError:
        answer = {}
    return resp.status, answer if isinstance(answer, dict) else {}


def whoami(server: str, token: str | None) -> dict[str, Any]:
    """``GET /api/v1/whoami``: ``{"user", "kind", "admin", "memberships", "auth"}``."""
    try:
        data = Client(server, token, timeout=15.0).call("GET", "/whoami")
    except AuthError as exc:
        raise AuthError(f"{server} refused the token: {exc.message}") from exc
    except NotFound as exc:
        raise TauError(
            f"{server} has no /api/v1/whoami: is it a tau server with access control?"
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("user"), str):
        raise TauError(f"{server} answered /api/v1/whoami with something else than a user")
    return data


def warn_if_cleartext(server: str) -> None:
    parts = urllib.parse.urlsplit(server)
    if parts.scheme != "http" or is_loopback_host(parts.hostname or ""):
        return
    click.echo(
        f"warning: {server} is plain http: the token crosses the network unencrypted",
        err=True,
    )


def _check_workspace(identity: dict[str, Any], workspace: str | None) -> None:
    memberships = identity.get("memberships")
    if workspace is None or identity.get("admin") or not isinstance(memberships, dict):
        return
    if workspace not in memberships:
        known = ", ".join(sorted(memberships)) or "none"
        click.echo(
            f"warning: {identity['user']} is not a member of workspace {workspace!r} "
            f"(member of: {known})",
            err=True,
        )
