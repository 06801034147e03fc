"""Classify how an attempt ended into the run's next state and reason. Pure."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from taugrid.domain.states import Reason, RunState
from taugrid.domain.stops import StopReason


@dataclass(frozen=True)
class AttemptExit:
    """What the executor observed when an attempt's process ended."""

    outcome: str  # succeeded | failed | cancelled | timeout | disk_limit | disk_full | lost
    exit_code: int | None
    signal: int | None = None
    error: str | None = None
    # Whether the kernel's OOM killer ended one of the workload's processes: True only when
    # a source said so (kernel log, cgroup counter); None when no source could be read.
    oom: bool | None = None
    # A sentence from the executor about how it ended (the disk figures, leftover
    # processes stopped after the supervisor vanished); None when there is nothing to add.
    detail: str | None = None
    # Why the executor stopped it, as it was told (outcome "cancelled"); None when it
    # ended by itself or the executor cannot say.
    stop_reason: StopReason | None = None


@dataclass(frozen=True)
class Verdict:
    state: RunState
    reason: Reason
    message: str


def classify_exit(ex: AttemptExit) -> Verdict:
    """Decide the run's terminal state from an attempt's exit.

    ``OOMKilled`` only when the executor knows the kernel's OOM killer ended the workload
    (``ex.oom``): a SIGKILL alone is also what ``kill -9``, a watchdog or another
    supervisor sends, so by itself it is reported as the signal it is.
    """
    if ex.outcome == "succeeded":
        return Verdict(RunState.SUCCEEDED, Reason.COMPLETED, "exited with code 0")
    if ex.outcome == "cancelled":
        why = "cancelled by request" + (f" ({ex.detail})" if ex.detail else "")
        return Verdict(RunState.CANCELLED, Reason.CANCELLED, why)
    if ex.outcome == "timeout":
        return Verdict(RunState.FAILED, Reason.TIMEOUT, "stopped after reaching its timeout")
    if ex.outcome == "disk_limit":
        why = ex.detail or "stopped: its files grew over its disk limit (resources.disk)"
        return Verdict(RunState.FAILED, Reason.DISK_LIMIT_EXCEEDED, why)
    if ex.outcome == "disk_full":
        return Verdict(
            RunState.FAILED, Reason.DISK_FULL, ex.detail or "the disk holding TAU_HOME is full"
        )
    if ex.outcome == "lost":
        why = ex.error or "the run's supervisor vanished"
        return Verdict(RunState.FAILED, Reason.LOST, why + (f"; {ex.detail}" if ex.detail else ""))
    if ex.error:
        return Verdict(RunState.FAILED, Reason.START_FAILED, ex.error)
    if ex.oom:
        how = f"signal {_signal_text(ex.signal)}" if ex.signal else f"code {ex.exit_code}"
        return Verdict(
            RunState.FAILED,
            Reason.OOM_KILLED,
            f"out of memory: the kernel's OOM killer ended the workload (exited by {how})",
        )
    if ex.signal is not None:
        return Verdict(
            RunState.FAILED, Reason.EXIT_CODE, f"killed by signal {_signal_text(ex.signal)}"
        )
    if ex.exit_code in _NOT_RUNNABLE:
        return Verdict(
            RunState.FAILED,
            Reason.START_FAILED,
            f"exited with code {ex.exit_code}: {_NOT_RUNNABLE[ex.exit_code]}",
        )
    return Verdict(RunState.FAILED, Reason.EXIT_CODE, f"exited with code {ex.exit_code}")


def _signal_text(sig: int) -> str:
    """``9 (SIGKILL)``: the number people grep for and the name they read."""
    return f"{sig} ({signal.Signals(sig).name})" if sig in _SIGNALS else str(sig)


_SIGNALS = {s.value for s in signal.Signals}
# What POSIX shells return when the command itself cannot run.
_NOT_RUNNABLE = {126: "command not executable", 127: "command not found"}
