"""``tau admin workspace|user|token|audit``: identity and access (docs/access.md).

Every command needs a platform admin's token, except that a workspace's ``admin`` role
lists that workspace and manages its members; the server answers NotFound to anyone
else. Each takes ``-o json``: the API answer as is, or ``{"ok": true}`` where the API answers 204.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import clock, emit_json, output_option, table
from taugrid.errors import UsageError

ROLES = ("admin", "maintainer", "researcher", "viewer")
AUDIT_LIMIT_MAX = 10_000

# taugrid.spec.parse_duration would import pydantic (~200 ms); this is the same grammar
# plus weeks.
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+", re.ASCII)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)", re.ASCII)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_NUMBER = re.compile(r"\d+(?:\.\d+)?", re.ASCII)


def parse_duration(text: str, option: str) -> float:
    """Seconds in ``30d``, ``12h``, ``1h30m`` (a bare number is seconds); UsageError else."""
    text = text.strip().lower()
    if _NUMBER.fullmatch(text):
        seconds = float(text)
    elif _DURATION.fullmatch(text):
        seconds = sum(float(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(text))
    else:
        raise UsageError(f"{option}: {text!r} is not a duration such as 30d, 12h, 1h30m or 90s")
    if seconds <= 0:
        raise UsageError(f"{option}: the duration must be more than zero")
    return seconds


def parse_when(text: str, option: str, now: float) -> float:
    """Unix seconds from a duration ago (``1d``), unix seconds, or an ISO date/time."""
    text = text.strip()
    if _NUMBER.fullmatch(text):
        return float(text)
    if _DURATION.fullmatch(text.lower()):
        return now - parse_duration(text, option)
    try:
        from datetime import datetime

        return datetime.fromisoformat(text).timestamp()  # no zone: local time
    except ValueError:
        raise UsageError(
            f"{option}: {text!r} is not a time: give a duration ago (30m, 12h, 7d), "
            "unix seconds or an ISO date such as 2025-01-31T12:00"
        ) from None


def check_role(role: str) -> str:
    if role.lower() not in ROLES:
        raise UsageError(f"unknown role {role!r}; the roles are {', '.join(ROLES)}")
    return role.lower()


def done(output: str, text: str) -> None:
    """The answer of a command whose API call answers 204."""
    if output == "json":
        emit_json({"ok": True})
    else:
        click.echo(text)


def cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def detail_text(detail: Any) -> str:
    if isinstance(detail, dict | list):
        return json.dumps(detail, separators=(",", ":"))
    return cell(detail)


def members_text(members: dict[str, str] | None) -> str:
    return ", ".join(f"{who}={role}" for who, role in sorted((members or {}).items())) or "-"


# -- workspaces ---------------------------------------------------------------------------
@click.group(name="workspace", help="Create, list and delete workspaces; manage members.")
def workspace() -> None:
    pass


@workspace.command(name="create", help="Create a workspace (it starts without members).")
@click.argument("name")
@output_option
def workspace_create(name: str, output: str) -> None:
    data = connect().create_workspace(name)
    if output == "json":
        emit_json(data)
        return
    click.echo(f"workspace {data['name']} created")
    click.echo(f"add members: tau admin workspace add-member {data['name']} USER --role ROLE")
    if data.get("note"):  # the policy in force gives it no queue yet, and how to add one
        click.echo(f"note: {data['note']}", err=True)


@workspace.command(
    name="list",
    help="List workspaces and their members' roles (a workspace admin: the ones they manage).",
)
@output_option
def workspace_list(output: str) -> None:
    data = connect().list_workspaces()
    if output == "json":
        emit_json(data)
        return
    rows = [
        [w["name"], clock(w["created_at"]), members_text(w["members"])] for w in data["workspaces"]
    ]
    if not rows:
        click.echo("no workspaces (create one: tau admin workspace create NAME)")
        return
    click.echo(table(["WORKSPACE", "CREATED", "MEMBERS"], rows))


@workspace.command(name="delete", help="Delete a workspace (refused while it has unfinished runs).")
@click.argument("name")
@output_option
def workspace_delete(name: str, output: str) -> None:
    connect().delete_workspace(name)
    done(output, f"workspace {name} deleted")


@workspace.command(
    name="add-member",
    help="Give a user a role in a workspace, or change it (platform or workspace admins).",
)
@click.argument("workspace_name", metavar="WORKSPACE")
@click.argument("user")
@click.option("--role", required=True, metavar="ROLE", help=f"One of: {', '.join(ROLES)}.")
@output_option
def workspace_add_member(workspace_name: str, user: str, role: str, output: str) -> None:
    data = connect().set_member(workspace_name, user, check_role(role))
    if output == "json":
        emit_json(data)
        return
    click.echo(f"{data['user']} is {data['role']} in workspace {data['workspace']}")


@workspace.command(
    name="remove-member",
    help="Take a user's role in a workspace away (platform or workspace admins).",
)
@click.argument("workspace_name", metavar="WORKSPACE")
@click.argument("user")
@output_option
def workspace_remove_member(workspace_name: str, user: str, output: str) -> None:
    connect().remove_member(workspace_name, user)
    done(output, f"{user} removed from workspace {workspace_name}")


# -- users --------------------------------------------------------------------------------
@click.group(name="user", help="Add, list and disable users and service accounts.")
def user() -> None:
    pass


@user.command(name="add", help="Add a user, or a service account for CI (--service).")
@click.argument("name")
@click.option("--service", is_flag=True, help="A service account (kind service), e.g. for CI.")
@click.option(
    "--agent", is_flag=True, help="The GPU health agents' account (sends health reports only)."
)
@click.option("--admin", "is_admin", is_flag=True, help="A platform admin (every workspace).")
@output_option
def user_add(name: str, service: bool, agent: bool, is_admin: bool, output: str) -> None:
    if agent and (service or is_admin):
        raise UsageError("--agent is an account of its own: not with --service or --admin")
    kind = "agent" if agent else "service" if service else "user"
    data = connect().create_user(name, kind=kind, admin=is_admin)
    if output == "json":
        emit_json(data)
        return
    what = {"service": "service account", "agent": "GPU health agent account"}.get(
        data["kind"], "user"
    )
    click.echo(f"{what} {data['name']} added" + (" (admin)" if data["admin"] else ""))
    click.echo(f"give it a token: tau admin token create --user {data['name']}")


@user.command(name="list", help="List users with their workspace roles.")
@output_option
def user_list(output: str) -> None:
    data = connect().list_users()
    if output == "json":
        emit_json(data)
        return
    rows = [
        [
            u["name"],
            u["kind"],
            "yes" if u["admin"] else "-",
            "disabled" if u["disabled"] else "active",
            clock(u["created_at"]),
            members_text(u["memberships"]),
        ]
        for u in data["users"]
    ]
    if not rows:
        click.echo("no users (add one: tau admin user add NAME)")
        return
    click.echo(table(["USER", "KIND", "ADMIN", "STATUS", "CREATED", "WORKSPACES"], rows))


@user.command(name="disable", help="Disable a user: their tokens stop working.")
@click.argument("name")
@output_option
def user_disable(name: str, output: str) -> None:
    data = connect().disable_user(name)
    if output == "json":
        emit_json(data)
        return
    click.echo(f"user {data['name']} disabled")


# -- tokens -------------------------------------------------------------------------------
@click.group(name="token", help="Create, list and revoke API tokens.")
def token() -> None:
    pass


@token.command(name="create", help="Create an API token for a user; the secret is shown once.")
@click.option("--user", "user_name", required=True, metavar="USER", help="Whose token.")
@click.option("--name", metavar="NAME", help="A label for the token, e.g. ci.")
@click.option(
    "--expires", metavar="DURATION", help="Lifetime such as 30d or 12h (default: no expiry)."
)
@output_option
def token_create(user_name: str, name: str | None, expires: str | None, output: str) -> None:
    expires_in_s = None if expires is None else parse_duration(expires, "--expires")
    data = connect().create_token(user_name, name=name, expires_in_s=expires_in_s)
    if output == "json":
        emit_json(data)
    else:
        click.echo(data["token"])  # alone on stdout: TOKEN=$(tau admin token create ...)
    until = "no expiry" if data["expires_at"] is None else f"expires {clock(data['expires_at'])}"
    click.echo(
        f"tau: token {data['id']} for {data['user']} ({until}): store the secret now, "
        "it will not be shown again",
        err=True,
    )


def token_status(t: dict[str, Any], now: float) -> str:
    if t["revoked_at"] is not None:
        return "revoked"
    if t["expires_at"] is not None and t["expires_at"] <= now:
        return "expired"
    return "active"


@token.command(name="list", help="List API tokens (never their secrets).")
@click.option("--user", "user_name", metavar="USER", help="Only this user's tokens.")
@output_option
def token_list(user_name: str | None, output: str) -> None:
    data = connect().list_tokens(user=user_name)
    if output == "json":
        emit_json(data)
        return
    now = time.time()
    rows = [
        [
            str(t["id"]),
            t["user"],
            cell(t["name"]),
            token_status(t, now),
            clock(t["created_at"]),
            "never" if t["expires_at"] is None else clock(t["expires_at"]),
            clock(t["last_used_at"]),
        ]
        for t in data["tokens"]
    ]
    if not rows:
        click.echo("no tokens (create one: tau admin token create --user USER)")
        return
    click.echo(table(["ID", "USER", "NAME", "STATUS", "CREATED", "EXPIRES", "LAST USED"], rows))


@token.command(name="revoke", help="Revoke an API token: it stops working at once.")
@click.argument("token_id", metavar="ID")
@output_option
def token_revoke(token_id: str, output: str) -> None:
    connect().revoke_token(token_id)
    done(output, f"token {token_id} revoked")


# -- audit --------------------------------------------------------------------------------
@click.command(name="audit", help="Show the audit log, newest first; --jsonl exports it.")
@click.option("--actor", metavar="USER", help="Only what this user did.")
@click.option("--action", metavar="ACTION", help="Only this action.")
@click.option("--workspace", "workspace_name", metavar="WORKSPACE", help="Only this workspace.")
@click.option("--since", metavar="WHEN", help="From: a duration ago (1d), unix seconds or a date.")
@click.option("--until", metavar="WHEN", help="Up to: a duration ago, unix seconds or a date.")
@click.option("--limit", type=int, metavar="N", help="At most N entries, 1-10000 (default 100).")
@click.option("--jsonl", is_flag=True, help="One JSON object per line, for export.")
@output_option
def audit(
    actor: str | None,
    action: str | None,
    workspace_name: str | None,
    since: str | None,
    until: str | None,
    limit: int | None,
    jsonl: bool,
    output: str,
) -> None:
    if jsonl and output == "json":
        raise UsageError("--jsonl and -o json are two formats: give one")
    if limit is not None and not 1 <= limit <= AUDIT_LIMIT_MAX:
        raise UsageError(f"--limit must be between 1 and {AUDIT_LIMIT_MAX}")
    now = time.time()
    since_s = None if since is None else parse_when(since, "--since", now)
    until_s = None if until is None else parse_when(until, "--until", now)
    if since_s is not None and until_s is not None and since_s > until_s:
        raise UsageError("--since is later than --until")
    data = connect().audit(
        actor=actor,
        action=action,
        workspace=workspace_name,
        since=since_s,
        until=until_s,
        limit=limit,
    )
    if output == "json":
        emit_json(data)
        return
    if jsonl:
        for entry in data["entries"]:
            click.echo(json.dumps(entry, separators=(",", ":")))
        return
    rows = [
        [
            clock(e["at"]),
            *(cell(e[k]) for k in ("actor", "action", "target", "workspace", "source", "outcome")),
            detail_text(e["detail"]),
        ]
        for e in data["entries"]
    ]
    if not rows:
        click.echo("no audit entries match")
        return
    headers = ["AT", "ACTOR", "ACTION", "TARGET", "WORKSPACE", "SOURCE", "OUTCOME", "DETAIL"]
    click.echo(table(headers, rows))


COMMANDS: tuple[click.Command, ...] = (workspace, user, token, audit)
