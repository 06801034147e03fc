"""List runs with filters.

With --experiment, the runs of one experiment side by side: its group and tags, and the
latest value of each metric (--metric to choose them; by default up to six found).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import click

from taugrid.cli.commands.status import Column, metric_value, runs_table
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
AUTO_METRICS = 6
TAGS_WIDTH = 40


def parse_since(text: str) -> float:
    m = re.fullmatch(r"(\d+)([smhdw])", text.strip())
    if not m:
        raise UsageError(f"--since {text!r}: use a duration like 30m, 6h, 2d")
    return time.time() - int(m.group(1)) * _UNITS[m.group(2)]


def auto_metrics(runs: Sequence[dict[str, Any]], limit: int = AUTO_METRICS) -> list[str]:
    """The metric keys the most runs have (ties by name), at most ``limit``."""
    counts: Counter[str] = Counter()
    for r in runs:
        counts.update(((r.get("metrics_last") or {}).get("values") or {}).keys())
    return [k for k, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:limit]


def experiment_columns(metrics: Sequence[str]) -> list[Column]:
    """GROUP, TAGS and one column per metric (its latest value; blank if never logged)."""

    def group(r: dict[str, Any]) -> str:
        return str((r.get("experiment") or {}).get("group") or "-")

    def tags(r: dict[str, Any]) -> str:
        tagged = (r.get("experiment") or {}).get("tags") or {}
        text = ",".join(f"{k}={v}" for k, v in tagged.items()) or "-"
        return text if len(text) <= TAGS_WIDTH else text[: TAGS_WIDTH - 1] + "…"

    def metric(key: str) -> Column:
        def cell(r: dict[str, Any]) -> str:
            values = (r.get("metrics_last") or {}).get("values") or {}
            return metric_value(values[key]) if key in values else ""

        return key.upper(), cell

    return [("GROUP", group), ("TAGS", tags), *(metric(k) for k in metrics)]


@click.command(name="list", help=__doc__)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(STATES, case_sensitive=False),
    help="Repeatable.",
)
@click.option("--name", help="Only runs with this name.")
@click.option("--workspace", help="Only runs of this workspace.")
@click.option("--experiment", help="Only runs of this experiment; adds its columns.")
@click.option("--queue", help="Only runs of this queue.")
@click.option("--user", help="Only runs this user submitted.")
@click.option(
    "--search",
    metavar="TEXT",
    help="Only runs with TEXT in their id, name, experiment, submitter or message (any case).",
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="KEY",
    help="Show the latest value of this metric; repeatable.",
)
@click.option("--since", help="Only runs submitted within this long, e.g. 6h, 2d.")
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@output_option
def command(
    states: tuple[str, ...],
    name: str | None,
    workspace: str | None,
    experiment: str | None,
    queue: str | None,
    user: str | None,
    search: str | None,
    metrics: tuple[str, ...],
    since: str | None,
    limit: int,
    output: str,
) -> None:
    client = connect()
    params = {
        "state": [s.upper() for s in states] or None,
        "name": name,
        "workspace": workspace,
        "experiment": experiment,
        "queue": queue,
        "user": user,
        "q": search,
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
    elif not runs:
        click.echo("No matching runs.")
    elif experiment is not None or metrics:
        keys = list(metrics) or auto_metrics(runs)
        click.echo(runs_table(runs, experiment_columns(keys)))
    else:
        click.echo(runs_table(runs))
