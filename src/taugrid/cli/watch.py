"""Watching a run until it ends: ``tau run --wait``, ``--follow`` and ``tau cancel``."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from taugrid.cli.client import Client
from taugrid.cli.output import clock, human_seconds

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
POLL_S = 0.2


def exit_code_of(run: dict[str, Any]) -> int:
    """The run's own exit code when it has one, so CI sees what the workload said."""
    if run["state"] == "SUCCEEDED":
        return 0
    code = run.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else 1


def wait_for(
    client: Client,
    run_id: str,
    *,
    show: bool = True,
    timeout: float | None = None,
    since: float | None = None,
) -> dict[str, Any]:
    """Poll until the run is terminal, printing each transition as it happens (only those
    at or after ``since``, when given: a resumed run's history is not news)."""
    seen = 0
    if since is not None:
        seen = sum(1 for e in client.get_run(run_id)["events"] if e["at"] < since)
    deadline = None if timeout is None else time.monotonic() + timeout
    live = _Live() if show and sys.stderr.isatty() else None
    try:
        while True:
            run = client.get_run(run_id)
            if show:
                for e in run["events"][seen:]:
                    line = f"  {clock(e['at'])}  {e['to_state']:<9}  {e['reason']}: {e['message']}"
                    if live:
                        live.console.print(line, highlight=False)
                    else:
                        click.echo(line, err=True)
                seen = len(run["events"])
            if live:
                started = run.get("started_at")
                elapsed = human_seconds(time.time() - started) if started else "-"
                line = _last_log_line(client, run) if run["attempts"] else ""
                live.update(f"{run['id']}  {run['state']}  {elapsed}  [dim]{line}[/dim]")
            if run["state"] in TERMINAL:
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
    finally:
        if live:
            live.stop()
    if show and run["state"] in TERMINAL:
        took = human_seconds(
            (run["finished_at"] or time.time()) - (run["started_at"] or run["created_at"])
        )
        code = "-" if run["exit_code"] is None else run["exit_code"]
        click.echo(f"run {run['id']} {run['state']} after {took} (exit {code})", err=True)
    return run


def _last_log_line(client: Client, run: dict[str, Any]) -> str:
    from rich.markup import escape

    text = b"".join(client.stream(f"/runs/{run['id']}/logs", {"tail": 1}))
    return escape(text.decode(errors="replace").strip()[-100:])


def follow_logs(client: Client, run_id: str) -> dict[str, Any]:
    out = sys.stdout.buffer
    for chunk in client.stream(f"/runs/{run_id}/logs", {"follow": True}):
        out.write(chunk)
        out.flush()
    return wait_for(client, run_id, show=False)


class _Live:
    """One status line on a terminal: run, state, elapsed time and its latest log line."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.status = self.console.status("")
        self.status.start()

    def update(self, text: str) -> None:
        self.status.update(text)

    def stop(self) -> None:
        self.status.stop()
