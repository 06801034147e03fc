"""Manage secrets that runs get as environment variables.

A spec's `secrets: {HF_TOKEN: hf/token}` puts the value of the secret `hf/token` into
the workload's environment as HF_TOKEN. Values are kept by the server, readable by you
alone, and never shown: not by these commands, not in run records, logs or API answers.

\b
  tau secret set hf/token              prompts without echo (or reads stdin)
  printf %s "$TOKEN" | tau secret set hf/token
  tau secret set hf/token --from-env HF_TOKEN
  tau secret list
  tau secret delete hf/token
"""

from __future__ import annotations

import os
import sys

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import ago, clock, emit_json, output_option, table
from taugrid.errors import UsageError
from taugrid.executors.local.secrets import check_ref, check_value

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
@click.pass_context
def set_(ctx: click.Context, ref: str, from_env: str | None) -> None:
    if ctx.args:
        raise UsageError(NO_VALUE_ARGUMENT)
    ref = _ref(ref)
    value = read_value(ref, from_env)
    connect().put_secret(ref, value)
    click.echo(f"secret {ref} set")


@command.command(name="list", help="List secrets: names and when they were set, never values.")
@output_option
def list_(output: str) -> None:
    data = connect().list_secrets()
    if output == "json":
        emit_json(data)
        return
    rows = [[s["ref"], clock(s["updated_at"]), ago(s["updated_at"])] for s in data["secrets"]]
    if not rows:
        click.echo("no secrets (set one: tau secret set REF)")
        return
    click.echo(table(["REF", "UPDATED", "AGE"], rows))


@command.command(name="delete", help="Delete a secret.")
@click.argument("ref")
def delete(ref: str) -> None:
    ref = _ref(ref)
    connect().delete_secret(ref)
    click.echo(f"secret {ref} deleted")
