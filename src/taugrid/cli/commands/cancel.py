"""Cancel runs: SIGTERM, grace period, then SIGKILL.

The whole process group of the run gets SIGTERM; after the spec's stop_grace, SIGKILL.
"""

from __future__ import annotations

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.cli.watch import TERMINAL, wait_for
from taugrid.errors import TauError


@click.command(name="cancel", help=__doc__)
@click.argument("runs", nargs=-1, required=True)
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
    ctx: click.Context, runs: tuple[str, ...], no_wait: bool, timeout: float, output: str
) -> None:
    client = connect()
    results, failed = [], None
    for ref in runs:
        try:
            run = client.cancel(ref)
        except TauError as exc:
            failed = failed or exc
            click.echo(f"tau: {ref}: {exc.message}", err=True)
            continue
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
    if failed is not None:
        ctx.exit(failed.exit_code)
