"""Compare two runs: spec, code, environment, overrides.

Spec keys are dotted paths of the resolved specs (+ only in B, - only in A, ~ changed).
Code compares the snapshots (and, when they differ, the files in them: added, removed,
changed, with sizes), the git commits and the uncommitted changes recorded at submit;
Environment the Python version and packages and the recorded environment summary.
Exits 0 whether or not they differ.
"""

from __future__ import annotations

from typing import Any

import click

from taugrid.cli.client import Client
from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.cli.refs import in_workspace, workspace_option
from taugrid.errors import NotFound


@click.command(name="diff", help=__doc__)
@click.argument("run_a")
@click.argument("run_b")
@workspace_option
@output_option
def command(run_a: str, run_b: str, workspace: str | None, output: str) -> None:
    from taugrid.domain.rundiff import diff_runs, render

    client = connect()
    run_a, run_b = (in_workspace(client, r, workspace) for r in (run_a, run_b))
    a, b = client.get_run(run_a), client.get_run(run_b)
    files_a = files_b = None
    if a["spec"]["snapshot_digest"] != b["spec"]["snapshot_digest"]:
        files_a, files_b = snapshot_files(client, a["id"]), snapshot_files(client, b["id"])
    result = diff_runs(a, b, files_a, files_b)
    if output == "json":
        emit_json(result)
    else:
        click.echo(render(result))


def snapshot_files(client: Client, run_id: str) -> list[dict[str, Any]] | None:
    """The files of a run's snapshot (path, type, size, sha256); None when the server has
    no listing (its snapshot is gone, or a server of before listings)."""
    try:
        listing = client.call("GET", f"/runs/{run_id}/snapshot")
    except NotFound:
        return None
    return list(listing["files"])
