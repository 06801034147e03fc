"""Compare two runs: spec, code, environment, overrides.

Spec keys are dotted paths of the resolved specs (+ only in B, - only in A, ~ changed).
Code compares the snapshots, the git commits and the uncommitted changes recorded at
submit; Environment the Python version and packages and the recorded environment
summary. Exits 0 whether or not they differ.
"""

from __future__ import annotations

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.cli.refs import in_workspace, workspace_option


@click.command(name="diff", help=__doc__)
@click.argument("run_a")
@click.argument("run_b")
@workspace_option
@output_option
def command(run_a: str, run_b: str, workspace: str | None, output: str) -> None:
    from taugrid.cli.diffing import diff_runs, render

    client = connect()
    run_a, run_b = (in_workspace(client, r, workspace) for r in (run_a, run_b))
    result = diff_runs(client.get_run(run_a), client.get_run(run_b))
    if output == "json":
        emit_json(result)
    else:
        click.echo(render(result))
