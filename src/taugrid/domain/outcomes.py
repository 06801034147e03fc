"""Classify how an attempt ended into the run's next state and reason. Pure."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from taugrid.domain.states import Reason, RunState


@dataclass(frozen=True)
class AttemptExit:
    """What the executor observed when an attempt's process ended."""

    outcome: str  # succeeded | failed | cancelled | timeout | lost
    exit_code: int | None
    signal: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Verdict:
    state: RunState
    reason: Reason
    message: str


def classify_exit(ex: AttemptExit) -> Verdict:
    """Decide the run's terminal state from an attempt's exit.

    SIGKILL with nobody asking for it is how the Linux OOM killer ends a process, so it
    is reported as ``OOMKilled`` (the best signal local mode has; the kubelet says so
    explicitly on a cluster).
    """
    if ex.outcome == "succeeded":
        return Verdict(RunState.SUCCEEDED, Reason.COMPLETED, "exited with code 0")
    if ex.outcome == "cancelled":
        return Verdict(RunState.CANCELLED, Reason.CANCELLED, "cancelled by request")
    if ex.outcome == "timeout":
        return Verdict(RunState.FAILED, Reason.TIMEOUT, "stopped after reaching its timeout")
    if ex.outcome == "lost":
        return Verdict(RunState.FAILED, Reason.LOST, ex.error or "the run's supervisor vanished")
    if ex.error:
        return Verdict(RunState.FAILED, Reason.START_FAILED, ex.error)
    if ex.signal == signal.SIGKILL:
        return Verdict(
            RunState.FAILED, Reason.OOM_KILLED, "killed by SIGKILL (likely out of memory)"
        )
    if ex.signal is not None:
        name = signal.Signals(ex.signal).name if ex.signal in _SIGNALS else str(ex.signal)
        return Verdict(RunState.FAILED, Reason.EXIT_CODE, f"killed by signal {name}")
    if ex.exit_code in _NOT_RUNNABLE:
        return Verdict(
            RunState.FAILED,
            Reason.START_FAILED,
            f"exited with code {ex.exit_code}: {_NOT_RUNNABLE[ex.exit_code]}",
        )
    return Verdict(RunState.FAILED, Reason.EXIT_CODE, f"exited with code {ex.exit_code}")


_SIGNALS = {s.value for s in signal.Signals}
# What POSIX shells return when the command itself cannot run.
_NOT_RUNNABLE = {126: "command not executable", 127: "command not found"}
