"""Resume a finished run from its newest good checkpoint.

The run keeps its id and gets a new attempt; the server picks the checkpoint, and the
attempt shows it ("resumed from") once admitted. Only a run that has ended (succeeded,
failed or cancelled) can be resumed.
"""

from __future__ import annotations

from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.cli.refs import in_workspace, workspace_option
from taugrid.cli.runflags import RunFlags, watch
from taugrid.cli.watch import exit_code_of


@click.command(name="resume", help=__doc__)
@click.argument("run")
@workspace_option
@click.option("--wait", is_flag=True, help="Block until the run ends; exit with its exit code.")
@click.option("-f", "--follow", is_flag=True, help="Stream the run's logs until it ends.")
@output_option
@click.pass_context
def command(
    ctx: click.Context, run: str, workspace: str | None, wait: bool, follow: bool, output: str
) -> None:
    client = connect()
    run = in_workspace(client, run, workspace)
    resumed = client.resume(run)  # Conflict (exit 7) unless the run has ended
    flags = RunFlags(wait=wait, follow=follow, output=output)
    if output == "json" and not flags.watching:
        emit_json(resumed)
        return
    attempt = None
    if output != "json":
        detail = client.get_run(resumed["id"])
        attempt = next_attempt(detail)
        click.echo(resume_line(resumed, detail, attempt), err=flags.watching)
    final = watch(client, resumed["id"], flags, since=resumed.get("updated_at"))
    if final is None:
        return
    if output != "json" and attempt is not None:
        done = next((a for a in final["attempt_list"] if a["attempt"] == attempt), None)
        if done is not None and done.get("resumed_from"):
            click.echo(f"attempt {attempt} {_from(done['resumed_from'])}", err=True)
    ctx.exit(exit_code_of(final))


def next_attempt(detail: dict[str, Any]) -> int:
    """The number of the attempt the resume queued: attempts count from 0, and the new
    one may already be listed if the scheduler admitted it before we looked."""
    attempts = detail.get("attempt_list") or []
    if not attempts:
        return 0
    last = attempts[-1]
    return int(last["attempt"]) + (0 if last.get("finished_at") is None else 1)


def resume_line(resumed: dict[str, Any], detail: dict[str, Any], attempt: int) -> str:
    line = f"run {resumed['id']} resumed as attempt {attempt} ({resumed['state']})"
    listed = {a["attempt"]: a for a in detail.get("attempt_list") or []}
    if attempt in listed and listed[attempt].get("resumed_from"):
        return f"{line}, {_from(listed[attempt]['resumed_from'])}"
    for ck in detail.get("checkpoints") or []:  # newest step first
        if ck.get("verified"):
            return f"{line}; newest verified checkpoint: step {ck['step']}"
    if "checkpoints" in detail:
        return f"{line}; no verified checkpoint, so it starts from the beginning"
    return line


def _from(resumed_from: dict[str, Any]) -> str:
    return f"resumed from checkpoint step {resumed_from['step']} ({resumed_from['path']})"
