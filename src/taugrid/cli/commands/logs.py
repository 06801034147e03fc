"""Print or follow a run's logs.

stdout and stderr of the workload, interleaved as written. Each attempt (every restart is
a new attempt) has its own log: the latest is shown unless --attempt or --all says
otherwise. With --follow, a restarted run's new attempts follow on, each under a header.
"""

from __future__ import annotations

from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.refs import in_workspace, workspace_option
from taugrid.cli.watch import Watch, stream_attempts, stream_log
from taugrid.cli.watchtext import waiting_line


@click.command(name="logs", help=__doc__)
@click.argument("run")
@workspace_option
@click.option("-f", "--follow", is_flag=True, help="Keep streaming until the run ends.")
@click.option("--tail", type=click.IntRange(min=0), help="Start with the last N lines.")
@click.option("--attempt", type=click.IntRange(min=0), help="Only this attempt (0-based).")
@click.option("--all", "all_attempts", is_flag=True, help="Every attempt, oldest first.")
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    help="Only this rank's pod (a cluster run with several pods); unprefixed.",
)
def command(
    run: str,
    workspace: str | None,
    follow: bool,
    tail: int | None,
    attempt: int | None,
    all_attempts: bool,
    rank: int | None,
) -> None:
    client = connect()
    run = in_workspace(client, run, workspace)
    if attempt is not None or not (all_attempts or follow):
        stream_log(client, run, attempt, tail, follow, rank)
        return
    watch = Watch(client, run)
    detail = watch.get()

    def note_waiting(run: dict[str, Any]) -> None:
        # While it waits (not yet started, or queued again between attempts), why.
        if watch.pending_changed(run):
            click.echo(waiting_line(run), err=True)

    stream_attempts(
        client,
        detail,
        0 if all_attempts else max(detail["attempts"] - 1, 0),
        headers=all_attempts,
        tail=tail if not all_attempts else None,
        follow=follow,
        on_poll=note_waiting if follow else None,
        rank=rank,
    )
