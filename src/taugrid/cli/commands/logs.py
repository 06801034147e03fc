"""Print or follow a run's logs.

stdout and stderr of the workload, interleaved as written.
"""

from __future__ import annotations

import sys

import click

from taugrid.cli.connect import connect


@click.command(name="logs", help=__doc__)
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep streaming until the attempt ends.")
@click.option("--tail", type=click.IntRange(min=0), help="Start with the last N lines.")
@click.option("--attempt", type=click.IntRange(min=0), help="Attempt number (default: latest).")
def command(run: str, follow: bool, tail: int | None, attempt: int | None) -> None:
    client = connect()
    out = sys.stdout.buffer
    params = {"follow": follow, "tail": tail, "attempt": attempt}
    for chunk in client.stream(f"/runs/{run}/logs", params):
        out.write(chunk)
        out.flush()
