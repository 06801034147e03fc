"""Show recent runs, or one run in detail."""

from __future__ import annotations

import time
from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import ago, clock, duration, emit_json, exit_text, output_option, table

RECENT = 20


def runs_table(runs: list[dict[str, Any]]) -> str:
    now = time.time()
    rows = [
        [
            r["id"],
            r["state"],
            ago(r["created_at"], now),
            duration(r, now),
            exit_text(r),
            _reason(r),
        ]
        for r in runs
    ]
    return table(["RUN", "STATE", "SUBMITTED", "DURATION", "EXIT", "REASON"], rows)


def _reason(run: dict[str, Any]) -> str:
    pend = run.get("pending")
    if pend:
        return f"#{pend['position']} in {pend['cluster_queue']}: {pend['reason']}"
    return str(run["reason"])


def describe(run: dict[str, Any]) -> str:
    spec = run["spec"]["resolved"]
    cmd = spec.get("command")
    cmd_text = cmd if isinstance(cmd, str) else " ".join(cmd or [])
    lines = [
        f"Run:        {run['id']}",
        f"Name:       {run['name']}",
        f"State:      {run['state']} ({run['reason']}: {run['message']})",
        f"Workspace:  {run['workspace']}   Queue: {run['queue']}"
        f"   Priority: {run['priority'] or 'default'}",
        f"Command:    {cmd_text}",
        f"Resources:  gpus={run['gpus']}",
        f"Submitted:  {clock(run['created_at'])} by {run['submitter']}",
        f"Started:    {clock(run['started_at'])}",
        f"Finished:   {clock(run['finished_at'])}   Duration: {duration(run)}",
        f"Exit code:  {exit_text(run)}",
        *_pending_lines(run),
        f"Spec:       {run['spec']['source']}  hash {run['spec']['hash'][:12]}"
        f"  snapshot {run['spec']['snapshot_digest'][:12]}",
    ]
    if run["spec"]["overrides"]:
        lines.append(f"Overrides:  {' '.join(run['spec']['overrides'])}")
    lines += ["", "Events:"]
    events = [
        [clock(e["at"]), f"{e['from_state'] or '-'} -> {e['to_state']}", e["reason"], e["message"]]
        for e in run["events"]
    ]
    lines += [
        "  " + line
        for line in table(["TIME", "TRANSITION", "REASON", "MESSAGE"], events).splitlines()
    ]
    if run["attempt_list"]:
        lines += ["", "Attempts:"]
        atts = [
            [
                str(a["attempt"]),
                clock(a["started_at"]),
                clock(a["finished_at"]),
                a["outcome"] or "-",
                "-" if a["exit_code"] is None else str(a["exit_code"]),
                ",".join(map(str, a["placement"].get("gpus", []))) or "-",
            ]
            for a in run["attempt_list"]
        ]
        lines += [
            "  " + line
            for line in table(
                ["#", "STARTED", "FINISHED", "OUTCOME", "EXIT", "GPUS"], atts
            ).splitlines()
        ]
    return "\n".join(lines)


@click.command(name="status", help=__doc__)
@click.argument("run", required=False)
@output_option
def command(run: str | None, output: str) -> None:
    client = connect()
    if run:
        data = client.get_run(run)
        if output == "json":
            emit_json(data)
        else:
            click.echo(describe(data))
        return
    runs = client.list_runs(limit=RECENT)["runs"]
    if output == "json":
        emit_json({"runs": runs})
    elif runs:
        click.echo(runs_table(runs))
    else:
        click.echo("No runs yet. Submit one with: tau run -- python train.py")


def _pending_lines(run: dict[str, Any]) -> list[str]:
    pend = run.get("pending")
    if not pend:
        return []
    return [
        f"Waiting:    #{pend['position']} in cluster queue {pend['cluster_queue']} "
        f"({pend['reason']})",
        f"            {pend['message']}",
    ]
