"""What watching a run says, as pure functions over the API's plain data.

The pending reason of a queued run, the final status line, the notice after Ctrl-C and the
tail of a failed run's log: ``tau run --wait``/``--follow``, ``tau rerun``, ``tau resume``
and ``tau logs -f`` all say these the same way (taugrid.cli.watch does the I/O).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from taugrid.cli.output import human_seconds

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
WAITING = ("PENDING", "QUEUED")
TAIL_LINES = 10
CONFIRM_S = 3.0

# The scheduler ends each explanation with where the run stands ("; position 2 of 5 in
# queue gpu"); the short form says that up front as "#2 in gpu", so it is cut here.
_POSITION_SUFFIX = re.compile(r"; position \d+ of \d+ in queue \S+$")
# CSI and OSC escape sequences, then any other control character but tab.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def pending_detail(pend: Mapping[str, Any]) -> str:
    """The scheduler's sentence without the position it ends with."""
    return _POSITION_SUFFIX.sub("", str(pend.get("message") or "")).strip()


def pending_text(pend: Mapping[str, Any]) -> str:
    """``#3 in gpu-a100: WaitingForQuota (needs 2 GPUs of flavor a100; 6 of 8 in use)``."""
    head = f"#{pend['position']} in {pend['cluster_queue']}: {pend['reason']}"
    detail = pending_detail(pend)
    return f"{head} ({detail})" if detail else head


def pending_key(run: Mapping[str, Any]) -> tuple[str, str] | None:
    """What makes a new "why it waits" line worth printing: the reason and the sentence,
    not the position alone (a draining queue would print one line per run ahead)."""
    pend = run.get("pending")
    if run.get("state") not in WAITING or not pend:
        return None
    return (str(pend["reason"]), pending_detail(pend))


def waiting_line(run: Mapping[str, Any]) -> str:
    """The stderr line ``--follow`` and ``tau logs -f`` print while a run waits."""
    return f"run {run['id']} is waiting: {pending_text(run['pending'])}"


def final_line(run: Mapping[str, Any], now: float) -> str:
    """``run ID FAILED after 3.2s (exit 1)``: how ``--wait`` and ``--follow`` end."""
    start = run.get("started_at") or run["created_at"]
    took = human_seconds((run.get("finished_at") or now) - start)
    code = "-" if run.get("exit_code") is None else run["exit_code"]
    return f"run {run['id']} {run['state']} after {took} (exit {code})"


def interrupt_notice(run_id: str, state: str | None, *, can_confirm: bool) -> str:
    """Said at the first Ctrl-C: the run is not stopped by leaving the watch, and how to
    stop it; on a terminal, that a second Ctrl-C does it now."""
    goes_on = "stays queued" if state in WAITING else "keeps running"
    text = f"run {run_id} {goes_on}; stop it with: tau cancel {run_id}"
    if can_confirm:
        text += f" (press Ctrl-C again within {CONFIRM_S:g}s to cancel it now)"
    return text


def cancel_notice(run: Mapping[str, Any]) -> str:
    """Said after the second Ctrl-C cancelled the run (the answer of POST .../cancel)."""
    if run.get("state") == "CANCELLED":
        return f"run {run['id']} cancelled"
    return f"run {run['id']} is being cancelled (SIGTERM, then SIGKILL after its stop_grace)"


def shown_line(line: str) -> str:
    """A workload's log line made safe to print inside our own output: what a terminal
    would show after the last carriage return, without escape or control characters."""
    line = line.rstrip("\r").rsplit("\r", 1)[-1]
    return _CONTROLS.sub("", _ESCAPES.sub("", line))


def log_tail(text: str, most: int = TAIL_LINES) -> list[str]:
    """The last ``most`` lines of a log, each made safe by :func:`shown_line`."""
    lines = text.splitlines()
    return [shown_line(line) for line in lines[-most:]] if most > 0 else []


def full_log_hint(run_id: str, attempts: int) -> str:
    """Where the rest of the log is; every attempt's when there were several."""
    return f"full log: tau logs {run_id}" + (" --all" if attempts > 1 else "")


def ends_badly(run: Mapping[str, Any]) -> bool:
    """Failed, cancelled or timed out (a timeout is FAILED with reason Timeout)."""
    return run.get("state") in ("FAILED", "CANCELLED")
