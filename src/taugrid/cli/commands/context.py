"""List, show, switch and delete CLI contexts.

A context is a server, its API token and a default workspace, kept in
~/.config/tau/config.yaml (tau login adds them). The context `local`, the local server
in $TAU_HOME, always exists and is the default. The first of these wins: TAU_SERVER with
TAU_TOKEN; tau --context NAME; TAU_CONTEXT; the current context of the file; local.

\b
  tau context list
  tau context use lab
  tau context show
  tau --context local status
"""

from __future__ import annotations

from typing import Any

import click

from taugrid.cli import contexts
from taugrid.cli.connect import context_option, running_server
from taugrid.cli.output import emit_json, output_option, table
from taugrid.errors import NotFound, TauError
from taugrid.home import tau_home


@click.group(name="context", help=__doc__)
def command() -> None:
    pass


def _server_text(ctx: contexts.Context) -> str:
    return ctx.server or f"local server in {tau_home()}"


def _source_text(source: str) -> str:
    return {
        "TAU_SERVER": "from the TAU_SERVER environment variable",
        "--context": "from --context",
        "TAU_CONTEXT": "from the TAU_CONTEXT environment variable",
        "current-context": f"current in {contexts.config_path()}",
        "default": "the default",
    }.get(source, source)


@command.command(name="list", help="List contexts; * marks the one in use.")
@output_option
def list_(output: str) -> None:
    config = contexts.load()
    current: str | None = None
    note: str | None = None
    try:
        selection = contexts.select(context_option())
        if selection.source == "TAU_SERVER":
            note = f"TAU_SERVER is set: commands use {selection.context.server}, no context"
        else:
            current = selection.context.name
    except NotFound as exc:
        note = exc.message
    if output == "json":
        emit_json(
            {
                "current": current,
                "contexts": [
                    {
                        "name": c.name,
                        "server": c.server,
                        "workspace": c.workspace,
                        "current": c.name == current,
                    }
                    for c in config.all()
                ],
            }
        )
    else:
        rows = [
            ["*" if c.name == current else "", c.name, _server_text(c), c.workspace or "-"]
            for c in config.all()
        ]
        click.echo(table(["CURRENT", "NAME", "SERVER", "WORKSPACE"], rows))
    if note:
        click.echo(f"note: {note}", err=True)


@command.command(name="use", help="Make a context the current one.")
@click.argument("name")
def use(name: str) -> None:
    contexts.use(name)
    click.echo(f"switched to context {name}")
    note_overriding_variable()


def note_overriding_variable() -> None:
    var = contexts.overriding_variable()
    if var is not None:
        click.echo(f"note: {var} is set and takes precedence in this shell", err=True)


@command.command(name="show", help="Show the context in use and who you are there.")
@output_option
def show(output: str) -> None:
    selection = contexts.select(context_option())
    ctx = selection.context
    data: dict[str, Any] = {
        "name": None if selection.source == "TAU_SERVER" else ctx.name,
        "server": ctx.server,
        "workspace": ctx.workspace,
        "selected_by": selection.source,
        "identity": None,
    }
    error: TauError | None = None
    if ctx.server is not None:
        from taugrid.cli.commands.login import whoami

        try:
            data["identity"] = whoami(ctx.server, ctx.token)
        except TauError as exc:
            error = exc
            data["error"] = exc.to_dict()
    if output == "json":
        emit_json(data)
    else:
        click.echo("\n".join(_show_lines(selection, data)))
    if error is not None:
        raise error


def _show_lines(selection: contexts.Selection, data: dict[str, Any]) -> list[str]:
    ctx = selection.context
    name = data["name"] or "none (TAU_SERVER)"
    server = _server_text(ctx)
    if ctx.is_local:
        info = running_server(tau_home())
        server += f" (running at {info['url']})" if info else " (not running)"
    lines = [
        f"Context:     {name} ({_source_text(selection.source)})",
        f"Server:      {server}",
        f"Workspace:   {ctx.workspace or '-'}",
    ]
    who = data["identity"]
    if who:
        roles = ", ".join(f"{ws}={role}" for ws, role in (who.get("memberships") or {}).items())
        kind = who.get("kind") or "user"
        lines += [
            f"User:        {who['user']} ({kind}{', admin' if who.get('admin') else ''})",
            f"Auth:        {who.get('auth') or '-'}",
            f"Memberships: {roles or '-'}",
        ]
    return lines


@command.command(name="delete", help="Delete a context and its stored token.")
@click.argument("name")
def delete(name: str) -> None:
    was_current = contexts.delete(name)
    suffix = "; the current context is now local" if was_current else ""
    click.echo(f"deleted context {name}{suffix}")
