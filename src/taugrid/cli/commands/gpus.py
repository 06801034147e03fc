"""Show GPUs: health, what is out of service and why, what runs where.

A GPU out of service (quarantined by the health monitor) is given to no run until a
platform admin returns it (``tau admin health return GPU``). With monitoring off the
health is shown as ``unknown``, never as healthy. On a cluster: every GPU node with what
its agent last reported, TauGrid's cordon and the GPUs out of service
(``tau admin health return NODE``).
"""

from __future__ import annotations

from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option, table


def gpu_rows(gpus: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for g in gpus:
        runs = ", ".join(g["runs"]) or "-"
        if g.get("other_runs"):
            runs = (runs if g["runs"] else "") + f" (+{g['other_runs']} of other workspaces)"
        why = g.get("reason") or "-"
        if g.get("level_words"):
            why = f"L{g['level']} {g['level_words']}: {why}"
        rows.append([str(g["index"]), g["name"], g["health"].upper(), why, runs.strip()])
    return rows


def node_rows(nodes: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for n in nodes:
        out = n["out_of_service"]
        why = "; ".join(f"{o['gpu']}: L{o['level']} {o['reason']}" for o in out)
        if n["health"] == "unknown":
            why = why or "no report from its agent lately"
        elif n["level"] >= 2 and not why:
            why = f"L{n['level']}"
        cordoned = "by TauGrid" if n["cordoned_by_taugrid"] else "-"
        rows.append(
            [n["node"], n["health"].upper(), str(len(n["gpus"]) or "-"), cordoned, why or "-"]
        )
    return rows


@click.command(name="gpus", help=__doc__)
@output_option
def command(output: str) -> None:
    data = connect().call("GET", "/gpus")
    if output == "json":
        emit_json(data)
        return
    if data["monitor"] == "off":
        click.echo("GPU health monitoring is off on this server: health is unknown")
    elif data["monitor"] == "shadow":
        click.echo("GPU health monitoring is in shadow mode: faults are recorded, not acted on")
    if data.get("nodes") is not None:
        if not data["nodes"]:
            click.echo("no GPU nodes in the cluster")
        else:
            headers = ["NODE", "HEALTH", "GPUS", "CORDONED", "WHY"]
            click.echo(table(headers, node_rows(data["nodes"])))
        return
    if not data["gpus"]:
        click.echo("no GPUs on this server")
        return
    click.echo(table(["GPU", "NAME", "HEALTH", "WHY", "RUNS"], gpu_rows(data["gpus"])))
