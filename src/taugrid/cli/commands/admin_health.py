"""``tau admin health``: the GPU health monitor's events, returning a GPU to service after
a human decision, and fault injection for drills and demos (platform admins only)."""

from __future__ import annotations

import time
from datetime import datetime

import click

from taugrid.cli.commands import admin_health_record
from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option, table
from taugrid.errors import UsageError


@click.group(name="health", help="GPU health: events, returning GPUs, fault injection.")
def health() -> None:
    pass


def _since(text: str | None) -> float | None:
    """``1h``, ``30m``, ``2d`` ago, or a unix time."""
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1:] in units:
            return time.time() - float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        raise UsageError(
            f"--since {text!r}: give a duration (30m, 1h, 2d) or a unix time"
        ) from None


def event_rows(events: list[dict[str, object]]) -> list[list[str]]:
    rows = []
    for e in events:
        at = datetime.fromtimestamp(float(e["at"])).strftime("%Y-%m-%d %H:%M:%S")  # type: ignore[arg-type]
        gpu = "-" if e["gpu_index"] is None else str(e["gpu_index"])
        runs = ", ".join(e["runs"] or []) or "-"  # type: ignore[arg-type]
        rows.append(
            [str(e["id"]), at, gpu, f"L{e['level']}", str(e["outcome"]), str(e["reason"]), runs]
        )
    return rows


@health.command(name="events", help="The monitor's decisions, newest first.")
@click.option("--since", default=None, help="Only since then: 30m, 1h, 2d, or a unix time.")
@click.option("--level", type=click.IntRange(0, 5), default=0, help="Only this level and above.")
@click.option("--limit", type=click.IntRange(1, 1000), default=200, show_default=True)
@output_option
def events(since: str | None, level: int, limit: int, output: str) -> None:
    params: dict[str, object] = {"level": level, "limit": limit}
    if (at := _since(since)) is not None:
        params["since"] = at
    data = connect().call("GET", "/admin/health/events", params=params)
    if output == "json":
        emit_json(data)
    elif not data["events"]:
        click.echo("no health events")
    else:
        click.echo(
            table(
                ["ID", "AT", "GPU", "LEVEL", "OUTCOME", "WHAT", "RUNS"], event_rows(data["events"])
            )
        )


@health.command(
    name="return",
    help="Put a GPU (by index) or a cluster node (by name) back into service after a human "
    "decision.",
)
@click.argument("target")
def return_gpu(target: str) -> None:
    if target.isdigit():
        connect().call("POST", "/admin/health/return", json_body={"gpu": int(target)})
        click.echo(f"GPU {target} is back in service")
    else:
        connect().call("POST", "/admin/health/return", json_body={"node": target})
        click.echo(f"node {target} is back in service (TauGrid's cordon, if any, undone)")


@health.command(name="inject", help="Inject a fault through the monitor (drills and demos).")
@click.option("--gpu", type=click.IntRange(min=0), required=True, help="The GPU's index.")
@click.option("--xid", type=click.IntRange(0, 65535), required=True, help="The Xid, e.g. 79.")
@output_option
def inject(gpu: int, xid: int, output: str) -> None:
    data = connect().call("POST", "/admin/health/inject", json_body={"gpu": gpu, "xid": xid})
    if output == "json":
        emit_json(data)
        return
    for e in data["events"]:
        runs = f" (stopped: {', '.join(e['runs'])})" if e.get("runs") else ""
        click.echo(f"L{e['level']} {e['outcome']}: {e['reason']}{runs}")


for _sub in admin_health_record.COMMANDS:  # record: NVML readings as fixtures, no server
    health.add_command(_sub)

COMMANDS: tuple[click.Command, ...] = (health,)
