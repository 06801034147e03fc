"""Print a run's metrics as a table or CSV.

\b
  tau metrics RUN                      a table: step, time, attempt, then each metric
  tau metrics RUN --key loss --csv     CSV on stdout (empty cell: no value)
  tau metrics RUN --attempt 1 -o json

Metrics are what the workload logged with taugrid.log(step=..., name=value); a running
run's GPU use, as the server samples it, follows them (-o json: "gpu").
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import clock, emit_json, output_option, table
from taugrid.cli.refs import in_workspace, workspace_option
from taugrid.errors import NotFound, UsageError


def metric_keys(series: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every metric name, in the order the names first appear."""
    seen: dict[str, None] = {}
    for point in series:
        for key in point["values"]:
            seen.setdefault(key, None)
    return list(seen)


def select(series: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Points restricted to ``keys``; a point with none of them is left out."""
    wanted = set(keys)
    out = []
    for point in series:
        values = {k: v for k, v in point["values"].items() if k in wanted}
        if values:
            out.append({**point, "values": values})
    return out


def csv_cell(value: Any) -> str:
    """Full precision (``repr``), so the CSV loses nothing; empty for no value."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_csv(series: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> str:
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(["step", "time", "attempt", *keys])
    for p in series:
        values = p["values"]
        out.writerow(
            [csv_cell(p.get("step")), csv_cell(p["time"]), csv_cell(p["attempt"])]
            + [csv_cell(values.get(k)) for k in keys]
        )
    return buf.getvalue()


def table_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return str(value) if math.isinf(value) or math.isnan(value) else f"{value:.6g}"
    return str(value)


def to_table(series: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> str:
    rows = [
        [
            table_cell(p.get("step")),
            clock(p["time"]),
            str(p["attempt"]),
            *(table_cell(p["values"].get(k)) if k in p["values"] else "" for k in keys),
        ]
        for p in series
    ]
    return table(["STEP", "TIME", "ATTEMPT", *(k.upper() for k in keys)], rows)


@click.command(name="metrics", help=__doc__)
@click.argument("run")
@workspace_option
@click.option("--attempt", type=click.IntRange(min=0), help="Only this attempt (default: all).")
@click.option("--key", "keys", multiple=True, metavar="NAME", help="Only this metric; repeatable.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout, with a header row.")
@output_option
def command(
    run: str,
    workspace: str | None,
    attempt: int | None,
    keys: tuple[str, ...],
    as_csv: bool,
    output: str,
) -> None:
    if as_csv and output == "json":
        raise UsageError("--csv and -o json are two outputs; give one")
    client = connect()
    data = client.metrics(in_workspace(client, run, workspace), attempt)
    series = data["series"]
    available = metric_keys(series)
    if keys:
        missing = [k for k in keys if k not in available]
        if missing:
            raise NotFound(
                f"no metric named {', '.join(missing)} in run {data['run_id']} "
                f"(it has: {', '.join(available) or 'none yet'})"
            )
        series = select(series, keys)
    columns = list(keys) or available
    gpu = data.get("gpu") or []
    if output == "json":
        emit_json({"run_id": data["run_id"], "series": series, "gpu": gpu})
    elif as_csv:
        click.echo(to_csv(series, columns), nl=False)
    else:
        if series:
            click.echo(to_table(series, columns))
        else:
            click.echo(f"run {data['run_id']} has logged no metrics yet")
        if gpu and not keys:
            click.echo("\nGPU use (sampled by the server, the busiest GPU):")
            click.echo(gpu_table(gpu))


def gpu_table(samples: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            clock(s["time"]),
            f"{s['utilization_pct']:.0f}%",
            f"{s['memory_used_bytes'] / (1 << 30):.2f}",
        ]
        for s in samples
    ]
    return table(["TIME", "GPU UTIL", "MEMORY GIB"], rows)
