"""Run states and the one transition table (DESIGN.md 3.1).

Pure: no I/O. Every state change in TauGrid goes through :func:`check_transition`, so the
table below is the whole truth about which changes are legal.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    PENDING = "PENDING"
    QUEUED = "QUEUED"
    ADMITTED = "ADMITTED"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    PREEMPTED = "PREEMPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def active(self) -> bool:
        """Has (or is about to have) a process: the executor must watch it."""
        return self in (RunState.ADMITTED, RunState.RUNNING)


class Reason(StrEnum):
    """Stable machine words recorded with every transition."""

    SUBMITTED = "Submitted"
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    STARTED = "Started"
    COMPLETED = "Completed"
    EXIT_CODE = "ExitCode"
    OOM_KILLED = "OOMKilled"
    START_FAILED = "StartFailed"
    CANCELLED = "Cancelled"
    TIMEOUT = "Timeout"
    LOST = "Lost"
    DISK_LIMIT_EXCEEDED = "DiskLimitExceeded"  # the run's files grew over resources.disk
    DISK_FULL = "DiskFull"  # the disk holding TAU_HOME filled up under the run
    PREEMPTED = "Preempted"
    QUOTA_EXHAUSTED = "QuotaExhausted"
    GPU_FAULT = "GpuFault"
    RESTARTING = "Restarting"
    RESUMED = "Resumed"
    # Events that record something about a run without changing its state:
    CHECKPOINT_SKIPPED = "CheckpointSkipped"
    GPU_IDLE = "GpuIdle"  # its GPUs sat idle past the policy's gpu_idle (domain/gpu_use.py)
    FILES_REMOVED = "FilesRemoved"
    # The supervisor vanished without a result; its leftover processes are being stopped
    # (the run keeps its GPUs until none is left).
    SUPERVISOR_LOST = "SupervisorLost"


S = RunState
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})

# A finished run changes only when a person asks (`tau resume`): back to QUEUED as a new
# attempt. Nothing automatic ever leaves SUCCEEDED, FAILED or CANCELLED.
_ALLOWED: dict[RunState, frozenset[RunState]] = {
    S.PENDING: frozenset({S.QUEUED, S.FAILED, S.CANCELLED}),
    S.QUEUED: frozenset({S.ADMITTED, S.PREEMPTED, S.FAILED, S.CANCELLED}),
    S.ADMITTED: frozenset(
        {S.RUNNING, S.RESTARTING, S.PREEMPTED, S.SUCCEEDED, S.FAILED, S.CANCELLED}
    ),
    S.RUNNING: frozenset({S.RESTARTING, S.PREEMPTED, S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    S.RESTARTING: frozenset({S.QUEUED, S.FAILED, S.CANCELLED}),
    S.PREEMPTED: frozenset({S.QUEUED, S.FAILED, S.CANCELLED}),
    S.SUCCEEDED: frozenset({S.QUEUED}),
    S.FAILED: frozenset({S.QUEUED}),
    S.CANCELLED: frozenset({S.QUEUED}),
}


class IllegalTransition(ValueError):
    def __init__(self, current: RunState, target: RunState) -> None:
        super().__init__(f"illegal run transition {current} -> {target}")
        self.current = current
        self.target = target


def allowed_targets(current: RunState) -> frozenset[RunState]:
    return _ALLOWED[current]


def check_transition(current: RunState, target: RunState) -> None:
    """Raise :class:`IllegalTransition` unless ``current -> target`` is in the table."""
    if target not in _ALLOWED[current]:
        raise IllegalTransition(current, target)


class CancelAction(StrEnum):
    """What cancelling a run in a given state takes."""

    STOP_NOW = "stop_now"  # no process yet (or any more): it becomes CANCELLED at once
    SIGNAL = "signal"  # a process runs: record the request, the engine stops it
    FINISHED = "finished"  # nothing to cancel


def cancel_action(state: RunState) -> CancelAction:
    if state.terminal:
        return CancelAction.FINISHED
    if state.active:
        return CancelAction.SIGNAL
    return CancelAction.STOP_NOW
