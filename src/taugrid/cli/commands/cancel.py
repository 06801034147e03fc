"""Cancel runs: SIGTERM, grace period, then SIGKILL.

The whole process group of the run gets SIGTERM; after the spec's stop_grace, SIGKILL.
All the runs named are cancelled in one request, recorded in one transaction. Instead of
naming runs, choose them by filter: --state (queued, running, ...), --name, or --all (every
unfinished run you may cancel); tau asks before cancelling them (--yes for scripts).

\b
  tau cancel lr-0-1 lr-0-2
  tau cancel --state queued --name sweep
  tau cancel --all --yes
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import click

from taugrid.cli.client import Client
from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.cli.refs import in_workspace, workspace_option
from taugrid.cli.watch import TERMINAL, wait_for
from taugrid.errors import ERRORS_BY_CODE, TauError, UsageError

MAX_PER_REQUEST = 1000


# States a cancel can still act on; the rest are finished.
ACTIVE = ("PENDING", "QUEUED", "ADMITTED", "RUNNING", "RESTARTING", "PREEMPTED")


@click.command(name="cancel", help=__doc__)
@click.argument("runs", nargs=-1)
@workspace_option
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(ACTIVE, case_sensitive=False),
    help="Cancel the runs in this state; repeatable.",
)
@click.option("--name", help="Cancel the unfinished runs of this name.")
@click.option("--all", "all_runs", is_flag=True, help="Cancel every unfinished run.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before cancelling by filter.")
@click.option("--no-wait", is_flag=True, help="Return once the cancel is recorded.")
@click.option(
    "--timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds to wait for the runs to stop.",
)
@output_option
@click.pass_context
def command(
    ctx: click.Context,
    runs: tuple[str, ...],
    workspace: str | None,
    states: tuple[str, ...],
    name: str | None,
    all_runs: bool,
    yes: bool,
    no_wait: bool,
    timeout: float,
    output: str,
) -> None:
    client = connect()
    by_filter = bool(states or name or all_runs)
    if runs and by_filter:
        raise UsageError("name runs, or choose them with --state/--name/--all, not both")
    if not runs and not by_filter:
        raise UsageError("which runs? name them, or use --state, --name or --all")
    if by_filter:
        chosen = matching_runs(client, states, name, workspace)
        if not chosen:
            click.echo("no unfinished run matches", err=True)
            return
        confirm_cancel(chosen, yes)
        refs = [r["id"] for r in chosen]
    else:
        refs = list(dict.fromkeys(in_workspace(client, r, workspace) for r in runs))
    answers = []
    for i in range(0, len(refs), MAX_PER_REQUEST):
        answers.extend(client.cancel_many(refs[i : i + MAX_PER_REQUEST]))
    results, exit_code = [], 0
    for answer in answers:
        if answer["error"] is not None:
            err = answer["error"]
            exit_code = exit_code or _exit_code(err["code"])
            click.echo(f"tau: {answer['ref']}: {err['message']}", err=True)
            continue
        run = answer["run"]
        if not no_wait and run["state"] not in TERMINAL:
            run = wait_for(client, run["id"], show=False, timeout=timeout)
        results.append(run)
        if output != "json":
            click.echo(
                f"run {run['id']} {run['state']}"
                + (" (stopping)" if run["state"] not in TERMINAL else "")
            )
    if output == "json":
        emit_json({"runs": results})
    if exit_code:
        ctx.exit(exit_code)


def matching_runs(
    client: Client, states: tuple[str, ...], name: str | None, workspace: str | None
) -> list[dict[str, Any]]:
    """Every unfinished run the filters select (all pages), newest first."""
    params = {
        "state": [s.upper() for s in states] or list(ACTIVE),
        "name": name,
        "workspace": workspace,
    }
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = client.list_runs(**params, limit=1000, cursor=cursor)
        found += [r for r in page["runs"] if r["state"] in ACTIVE]
        cursor = page["next_cursor"]
        if cursor is None:
            return found


def confirm_cancel(chosen: list[dict[str, Any]], yes: bool) -> None:
    """Ask on a terminal before cancelling runs chosen by filter; refuse to guess in a
    script (no terminal) unless --yes says so."""
    counts = Counter(r["state"] for r in chosen)
    summary = ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))
    what = f"{len(chosen)} run{'s' if len(chosen) != 1 else ''} ({summary})"
    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"this would cancel {what}; add --yes to do it without a prompt")
    shown = ", ".join(r["id"] for r in chosen[:5]) + (", ..." if len(chosen) > 5 else "")
    if not click.confirm(f"Cancel {what}: {shown}?", default=False, err=True):
        raise click.Abort()


def _exit_code(code: str) -> int:
    cls = ERRORS_BY_CODE.get(code, TauError)
    return cls.exit_code
