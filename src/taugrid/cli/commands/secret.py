"""Manage secrets that runs get as environment variables.

A spec's `secrets: {HF_TOKEN: hf/token}` puts the value of the secret `hf/token` into
the workload's environment as HF_TOKEN. Secrets belong to a workspace (set by its
maintainers and admins) or to you alone within one (--personal, for researchers and up);
a run uses your personal secret of that name if you have one, else the workspace's.
Values are kept by the server and never shown: not by these commands, not in run
records, logs or API answers.

\b
  tau secret set hf/token              prompts without echo (or reads stdin)
  printf %s "$TOKEN" | tau secret set hf/token --workspace vision
  tau secret set hf/token --personal --from-env HF_TOKEN
  tau secret list [--workspace vision]
  tau secret delete hf/token [--personal]

--workspace defaults to the current context's workspace, then `default`.
"""

from __future__ import annotations

import os
import sys

import click

from taugrid.cli.connect import connect, default_workspace
from taugrid.cli.output import ago, clock, emit_json, output_option, table
from taugrid.domain.secret_refs import (
    DEFAULT_WORKSPACE,
    check_ref,
    check_value,
    check_workspace,
    refuse_value_as_ref,
)
from taugrid.errors import UsageError

NO_VALUE_ARGUMENT = (
    "tau secret set takes no value argument: command lines are visible to every user "
    "(ps). Pipe the value on stdin, type it at the prompt, or use --from-env VAR"
)


@click.group(name="secret", help=__doc__)
def command() -> None:
    pass


def _ref(ref: str) -> str:
    if "=" in ref:
        # REF=VALUE: say so without repeating what may be the value.
        raise UsageError(f"{NO_VALUE_ARGUMENT} (REF looks like NAME=VALUE)")
    refuse_value_as_ref(ref)
    return check_ref(ref)


def read_value(ref: str, from_env: str | None) -> str:
    """The value to store: from ``$from_env``, a no-echo prompt on a TTY, else stdin.

    One trailing newline is dropped from stdin (``echo value |`` adds it); the prompt and
    ``--from-env`` take the value exactly.
    """
    if from_env is not None:
        if from_env not in os.environ:
            raise UsageError(f"--from-env: the environment variable {from_env} is not set")
        value = os.environ[from_env]
    elif sys.stdin is None:
        raise UsageError("no value: stdin is closed; pipe the value or use --from-env VAR")
    elif sys.stdin.isatty():
        import getpass

        value = getpass.getpass(f"value of secret {ref} (not echoed): ")
    else:
        value = sys.stdin.read().removesuffix("\n").removesuffix("\r")
    return check_value(value)


def _workspace(workspace: str | None) -> str:
    """The workspace a secret command acts in: the flag, the context's, else default."""
    chosen = workspace or default_workspace() or DEFAULT_WORKSPACE
    return check_workspace(chosen)


workspace_option = click.option(
    "--workspace",
    metavar="W",
    help="Workspace of the secret (default: the context's workspace, then default).",
)
personal_option = click.option(
    "--personal",
    is_flag=True,
    help="Your own secret in the workspace, used by your runs only, in place of the "
    "workspace's secret of that name.",
)


def _where(workspace: str, personal: bool) -> str:
    return f"(personal) in workspace {workspace}" if personal else f"in workspace {workspace}"


@command.command(
    name="set",
    help="Set a secret's value, read from stdin or a hidden prompt.",
    # Extra arguments reach ctx.args instead of click's error, which would repeat them.
    context_settings={"allow_extra_args": True},
)
@click.argument("ref")
@click.option(
    "--from-env",
    metavar="VAR",
    help="Take the value from this environment variable of your shell.",
)
@workspace_option
@personal_option
@click.pass_context
def set_(
    ctx: click.Context, ref: str, from_env: str | None, workspace: str | None, personal: bool
) -> None:
    if ctx.args:
        raise UsageError(NO_VALUE_ARGUMENT)
    ref = _ref(ref)
    ws = _workspace(workspace)
    value = read_value(ref, from_env)
    connect().put_secret(ref, value, workspace=ws, personal=personal)
    click.echo(f"secret {ref} set {_where(ws, personal)}")


@command.command(
    name="list",
    help="List the workspace's secrets and your personal ones: names, scope and when "
    "they were set, never values.",
)
@workspace_option
@output_option
def list_(workspace: str | None, output: str) -> None:
    ws = _workspace(workspace)
    data = connect().list_secrets(workspace=ws)
    if output == "json":
        emit_json(data)
        return
    rows = [
        [s["ref"], s["scope"], s["owner"] or "-", clock(s["updated_at"]), ago(s["updated_at"])]
        for s in data["secrets"]
    ]
    if not rows:
        click.echo(f"no secrets in workspace {ws} (set one: tau secret set REF --workspace {ws})")
        return
    click.echo(table(["REF", "SCOPE", "OWNER", "UPDATED", "AGE"], rows))


@command.command(name="delete", help="Delete a secret.")
@click.argument("ref")
@workspace_option
@personal_option
def delete(ref: str, workspace: str | None, personal: bool) -> None:
    ref = _ref(ref)
    ws = _workspace(workspace)
    connect().delete_secret(ref, workspace=ws, personal=personal)
    click.echo(f"secret {ref} deleted {_where(ws, personal)}")
