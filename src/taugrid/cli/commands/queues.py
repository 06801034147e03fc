"""Show queues: quota, usage, pending and running runs.

Usage is shown as used/nominal per resource, with what the queue borrows from its cohort.
Under the table, the first runs waiting in each queue, in order, and why they wait.
A platform admin sees every queue; anyone else the cluster queues their workspaces'
local queues feed (with the queue's whole usage), only their own local queues, and
only their own workspaces' runs among those waiting.
"""

from __future__ import annotations

from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import emit_json, output_option, table
from taugrid.cli.watchtext import pending_detail

UNITS = {"gpu": "GPU", "cpu": "CPU", "memory": "mem"}


def amount(resource: str, value: int) -> str:
    if resource == "cpu":
        return f"{value / 1000:g}"
    if resource == "memory" and value:
        return f"{value / 2**30:.0f}Gi" if value >= 2**30 else f"{value / 2**20:.0f}Mi"
    return str(value)


def usage_cell(q: dict[str, Any], resource: str) -> str:
    """``used/nominal (+borrowed)`` summed over the queue's flavors."""
    nominal = sum(f.get(resource, 0) for f in q["quota"].values())
    used = sum(f.get(resource, 0) for f in q["used"].values())
    borrowed = sum(f.get(resource, 0) for f in q["borrowed"].values())
    cell = f"{amount(resource, used)}/{amount(resource, nominal)}"
    return cell + (f" (+{amount(resource, borrowed)})" if borrowed else "")


def head_lines(queues: list[dict[str, Any]]) -> list[str]:
    """``waiting in gpu:`` and one ``#1  RUN  Reason: why`` line per run at its head."""
    lines: list[str] = []
    for q in queues:
        heads = q.get("heads") or []
        if not heads:
            continue
        lines += ["", f"waiting in {q['name']}:"]
        width = max(len(h["run_id"]) for h in heads)
        for h in heads:
            why = pending_detail(h)
            lines.append(
                f"  #{h['position']:<3} {h['run_id']:<{width}}  {h['reason']}"
                + (f": {why}" if why else "")
            )
        if q["pending"] > len(heads):  # the rest, and runs of workspaces not the caller's
            lines.append(f"  ... {q['pending'] - len(heads)} more")
    return lines


@click.command(name="queues", help=__doc__)
@output_option
def command(output: str) -> None:
    data = connect().call("GET", "/queues")
    if output == "json":
        emit_json(data)
        return
    if not data["queues"]:
        # A non-admin sees the queues of their workspaces only.
        click.echo("no queues (none of your workspaces has a queue)")
        click.echo(f"policy: {data['policy']}")
        return
    rows = [
        [
            q["name"],
            ",".join(q["local_queues"]) or "-",
            q["cohort"] or "-",
            *(usage_cell(q, r) for r in UNITS),
            str(q["pending"]),
            str(q["running"]),
        ]
        for q in data["queues"]
    ]
    click.echo(
        table(
            [
                "CLUSTER QUEUE",
                "LOCAL QUEUES",
                "COHORT",
                "GPU",
                "CPU",
                "MEMORY",
                "PENDING",
                "RUNNING",
            ],
            rows,
        )
    )
    click.echo(f"policy: {data['policy']}")
    for line in head_lines(data["queues"]):
        click.echo(line)
