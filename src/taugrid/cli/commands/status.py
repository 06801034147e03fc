"""Show recent runs, or one run in detail."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import click

from taugrid.cli.connect import connect
from taugrid.cli.output import (
    ago,
    clock,
    duration,
    emit_json,
    exit_text,
    human_seconds,
    output_option,
    state_painter,
    table,
)
from taugrid.cli.refs import in_workspace

RECENT = 20
Column = tuple[str, Callable[[dict[str, Any]], str]]


def runs_table(runs: list[dict[str, Any]], extra: Sequence[Column] = ()) -> str:
    """The runs table; ``extra`` columns (header, cell of a run) go after the usual ones."""
    now = time.time()
    rows = [
        [
            r["id"],
            r["state"],
            ago(r["created_at"], now),
            duration(r, now),
            exit_text(r),
            _reason(r),
            *(cell(r) for _, cell in extra),
        ]
        for r in runs
    ]
    headers = ["RUN", "STATE", "SUBMITTED", "DURATION", "EXIT", "REASON"]
    return table([*headers, *(h for h, _ in extra)], rows, state_painter(1))


def _reason(run: dict[str, Any]) -> str:
    pend = run.get("pending")
    if pend:
        return f"#{pend['position']} in {pend['cluster_queue']}: {pend['reason']}"
    return str(run["reason"])


def describe(run: dict[str, Any]) -> str:
    spec = run["spec"]["resolved"]
    cmd = spec.get("command")
    import shlex  # here, not at the top: `tau status` (the list) is on the start-up budget

    # A list is argv: quoted as a shell would need it, so it can be pasted and run.
    cmd_text = cmd if isinstance(cmd, str) else shlex.join(cmd or [])
    lines = [
        f"Run:        {run['id']}",
        f"Name:       {run['name']}",
        f"State:      {run['state']} ({run['reason']}: {run['message']})",
        f"Workspace:  {run['workspace']}   Queue: {run['queue']}"
        f"   Priority: {run['priority'] or 'default'}",
        f"Command:    {cmd_text}",
        f"Resources:  gpus={run['gpus']}",
        f"Submitted:  {clock(run['created_at'])} by {run['submitter']}",
        f"Started:    {clock(run['started_at'])}{_latest_attempt_start(run)}",
        f"Finished:   {clock(run['finished_at'])}   Duration: {duration(run)}"
        + (" (from the first attempt's start)" if len(run.get("attempt_list") or ()) > 1 else ""),
        f"Exit code:  {exit_text(run)}",
        *_pending_lines(run),
        *([f"Now:        {run['progress']}"] if run.get("progress") else []),
        *_experiment_lines(run),
        *_restart_lines(run),
        *_metrics_lines(run),
        *gpu_use_lines(run),
        f"Spec:       {run['spec']['source']}  hash {run['spec']['hash'][:12]}"
        f"  snapshot {run['spec']['snapshot_digest'][:12]}",
    ]
    if run["spec"]["overrides"]:
        lines.append(f"Overrides:  {' '.join(run['spec']['overrides'])}")
    lines += _record_lines(run)
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
        lines += ["", "Attempts:", *_indent(attempts_table(run["attempt_list"]))]
        lines += [
            f"  attempt {a['attempt']}: {a['message']}"
            for a in run["attempt_list"]
            # the table already says what an exit code or a cancel has to say
            if a.get("failure_class") not in (None, "exit_code", "cancelled") and a.get("message")
        ]
    if run.get("checkpoints"):
        lines += ["", "Checkpoints:", *_indent(checkpoints_table(run["checkpoints"]))]
    return "\n".join(lines)


@click.command(name="status", help=__doc__)
@click.argument("run", required=False)
@click.option("--workspace", help="Only runs of this workspace (the list, or RUN's lookup).")
@output_option
def command(run: str | None, workspace: str | None, output: str) -> None:
    client = connect()
    if run:
        data = client.get_run(in_workspace(client, run, workspace))
        if output == "json":
            emit_json(data)
        else:
            click.echo(describe(data))
        return
    page = client.list_runs(limit=RECENT, workspace=workspace)
    runs = page["runs"]
    if output == "json":
        emit_json({"runs": runs})
    elif runs:
        click.echo(runs_table(runs))
        if page.get("next_cursor"):
            click.echo(
                f"(the newest {RECENT} runs; see more with: tau list --limit 200, "
                "or filter: tau list --state failed --since 1d)",
                err=True,
            )
    else:
        click.echo("No runs yet. Submit one with: tau run -- python train.py")


def _latest_attempt_start(run: dict[str, Any]) -> str:
    """The run started with its first attempt; with several, when the latest began too
    (the attempts table has each one's start and duration)."""
    attempts = run.get("attempt_list") or []
    if len(attempts) < 2 or attempts[-1].get("started_at") is None:
        return ""
    last = attempts[-1]
    return f"   (attempt {last['attempt']} started {clock(last['started_at'])})"


def _pending_lines(run: dict[str, Any]) -> list[str]:
    pend = run.get("pending")
    if not pend:
        return []
    return [
        f"Waiting:    #{pend['position']} in cluster queue {pend['cluster_queue']} "
        f"({pend['reason']})",
        f"            {pend['message']}",
    ]


def _indent(text: str) -> list[str]:
    return ["  " + line for line in text.splitlines()]


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def exit_of(attempt: dict[str, Any]) -> str:
    """``3`` for an exit code, ``SIGKILL`` for a signal, ``-`` for neither (yet)."""
    if attempt.get("signal"):
        import signal

        try:
            return signal.Signals(attempt["signal"]).name
        except ValueError:
            return f"signal {attempt['signal']}"
    return "-" if attempt.get("exit_code") is None else str(attempt["exit_code"])


def attempts_table(attempts: list[dict[str, Any]]) -> str:
    rows = [
        [
            str(a["attempt"]),
            clock(a["started_at"]),
            duration(a),
            a.get("outcome") or "-",
            a.get("reason") or "-",
            exit_of(a),
            f"step {a['resumed_from']['step']}" if a.get("resumed_from") else "-",
            ",".join(map(str, (a.get("placement") or {}).get("gpus", []))) or "-",
        ]
        for a in attempts
    ]
    headers = ["#", "STARTED", "DURATION", "OUTCOME", "REASON", "EXIT", "RESUMED FROM", "GPUS"]
    return table(headers, rows)


def checkpoints_table(checkpoints: list[dict[str, Any]]) -> str:
    rows = [
        [
            str(c["step"]),
            clock(c["created_at"]),
            "-" if c.get("attempt") is None else str(c["attempt"]),
            human_bytes(int(c.get("size") or 0)),
            str(c.get("file_count", "-")),
            "✓" if c.get("verified") else f"✗ {c.get('problem') or 'not verified'}",
        ]
        for c in checkpoints
    ]
    return table(["STEP", "TIME", "ATTEMPT", "SIZE", "FILES", "VERIFIED"], rows)


def metric_value(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _metrics_lines(run: dict[str, Any]) -> list[str]:
    last = run.get("metrics_last")
    if not last or not last.get("values"):
        return []
    step = "" if last.get("step") is None else f"step {last['step']}: "
    values = "  ".join(f"{k}={metric_value(v)}" for k, v in last["values"].items())
    return [f"Metrics:    {step}{values}  ({ago(last.get('time'))})"]


def gpu_use_lines(run: dict[str, Any]) -> list[str]:
    """A running run's GPUs as last sampled: the busiest one's utilization, the memory of
    all, and since when they sit idle (nothing when not read: never a reassuring 0 %)."""
    use = run.get("gpu_use")
    if not use:
        return []
    gib = 1 << 30
    each = ", ".join(f"{g['index']}: {g['utilization_pct']:.0f}%" for g in use["gpus"])
    text = (
        f"GPU use:    {use['utilization_pct']:.0f}% (GPU {each}), memory "
        f"{use['memory_used_bytes'] / gib:.1f} of {use['memory_total_bytes'] / gib:.0f} GiB"
        f"  ({ago(use['at'])})"
    )
    lines = [text]
    if use.get("idle_since") is not None:
        flagged = "; flagged by the policy's gpu_idle" if use.get("flagged_idle") else ""
        lines.append(
            f"            idle for {human_seconds(time.time() - use['idle_since'])}{flagged}"
        )
    return lines


def _restart_lines(run: dict[str, Any]) -> list[str]:
    policy = run.get("restart_policy")
    if not policy or not (policy.get("max") or policy.get("used")):
        return []
    text = (
        f"Restarts:   {policy.get('used', 0)}/{policy['max']} used"
        f" (on {', '.join(policy.get('on') or []) or 'nothing'}, "
        f"backoff {human_seconds(float(policy.get('backoff_s') or 0))})"
    )
    if policy.get("next_at") is not None:
        text += f"; next restart in {human_seconds(policy['next_at'] - time.time())}"
    return [text]


def _experiment_lines(run: dict[str, Any]) -> list[str]:
    exp = run.get("experiment")
    if not exp or not (exp.get("name") or exp.get("group") or exp.get("tags")):
        return []
    text = f"Experiment: {exp.get('name') or '-'}"
    if exp.get("group"):
        text += f"   Group: {exp['group']}"
    if exp.get("tags"):
        text += "   Tags: " + " ".join(f"{k}={v}" for k, v in exp["tags"].items())
    return [text]


def _record_lines(run: dict[str, Any]) -> list[str]:
    lines = []
    if "code" in run:
        git = (run.get("code") or {}).get("git")
        if git is None:
            lines.append("Code:       no git repository recorded")
        else:
            text = f"Code:       git {git['commit'][:12]}"
            if git.get("branch"):
                text += f" ({git['branch']})"
            if git.get("dirty"):
                parts = []
                if git.get("diff"):
                    n = len(git["diff"].splitlines())
                    parts.append(
                        f"{n}-line diff" + (", truncated" if git["diff_truncated"] else "")
                    )
                if git.get("untracked"):
                    parts.append(f"{len(git['untracked'])} untracked")
                text += ", dirty" + (f": {', '.join(parts)}" if parts else "")
            lines.append(text)
    if run.get("rerun_of"):
        lines.append(f"Rerun of:   {run['rerun_of']}")
    py = run.get("python_env")
    if py:
        lines.append(
            f"Python:     {py['implementation']} {py['version']}  {py['executable']}"
            f"  ({len(py.get('packages') or {})} packages)"
        )
    return lines
