"""List runs with filters."""

from __future__ import annotations

import re
import time
from typing import Any

import click

from taugrid.cli.commands.status import runs_table
from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option
from taugrid.errors import UsageError

STATES = [
    "PENDING",
    "QUEUED",
    "ADMITTED",
    "RUNNING",
    "RESTARTING",
    "PREEMPTED",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str) -> float:
    m = re.fullmatch(r"(\d+)([smhdw])", text.strip())
    if not m:
        raise UsageError(f"--since {text!r}: use a duration like 30m, 6h, 2d")
    return time.time() - int(m.group(1)) * _UNITS[m.group(2)]


@click.command(name="list", help=__doc__)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(STATES, case_sensitive=False),
    help="Repeatable.",
)
@click.option("--name", help="Only runs with this name.")
@click.option("--since", help="Only runs submitted within this long, e.g. 6h, 2d.")
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@output_option
def command(
    states: tuple[str, ...], name: str | None, since: str | None, limit: int, output: str
) -> None:
    client = connect()
    params = {
        "state": [s.upper() for s in states] or None,
        "name": name,
        "since": parse_since(since) if since else None,
    }
    runs: list[dict[str, Any]] = []
    cursor = None
    while len(runs) < limit:
        page = client.list_runs(**params, limit=min(1000, limit - len(runs)), cursor=cursor)
        runs += page["runs"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    if output == "json":
        emit_json({"runs": runs})
    else:
        click.echo(runs_table(runs) if runs else "No matching runs.")
