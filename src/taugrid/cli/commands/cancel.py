"""Cancel runs: SIGTERM, grace period, then SIGKILL.

The whole process group of the run gets SIGTERM; after the spec's stop_grace, SIGKILL.
All the runs named are cancelled in one request, recorded in one transaction.
"""

from __future__ import annotations

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.cli.refs import in_workspace, workspace_option
from taugrid.cli.watch import TERMINAL, wait_for
from taugrid.errors import ERRORS_BY_CODE, TauError

MAX_PER_REQUEST = 1000


@click.command(name="cancel", help=__doc__)
@click.argument("runs", nargs=-1, required=True)
@workspace_option
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
    no_wait: bool,
    timeout: float,
    output: str,
) -> None:
    client = connect()
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


def _exit_code(code: str) -> int:
    cls = ERRORS_BY_CODE.get(code, TauError)
    return cls.exit_code
