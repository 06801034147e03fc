"""Why the control plane stops an attempt, carried from the decision to the exit. Pure.

A stop is asked for by someone (a person's cancel, the scheduler's preemption, a GPU
fault, a drain, an external admitter's eviction); the executor delivers it and reports
it back with the attempt's exit, so what the run does next (end, requeue, restart from a
checkpoint written before the fault) follows from the reason, never from which columns
happen to be set.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StopReason(StrEnum):
    CANCEL = "cancel"  # a person asked: the run ends CANCELLED
    PREEMPT = "preempt"  # room for a higher-priority run, or an admitter's eviction
    TIMEOUT = "timeout"  # the run's own time budget (for executors that do not enforce it)
    HARDWARE = "hardware"  # a GPU or node fault: restarts as `hardware`, never as the user's
    DRAIN = "drain"  # the machine or node is taken out of service: requeued like a preemption


# Reasons after which a run goes back to its queue without using a restart (Kueue's view:
# the scheduler's or the platform's doing, not the workload's failure).
REQUEUED = frozenset({StopReason.PREEMPT, StopReason.DRAIN})


@dataclass(frozen=True)
class StopRequest:
    """A stop the control plane recorded for a run's current attempt (durable before it
    is sent). ``fault_at``: for a hardware stop, when the fault happened; checkpoints
    written after it are not resumed from."""

    reason: StopReason
    requested_at: float
    message: str
    fault_at: float | None = None
    preemptor: str | None = None  # the run a preemption makes room for


def parse_stop_reason(value: object) -> StopReason | None:
    """The reason an executor reported, or None for anything it could not have meant."""
    try:
        return StopReason(str(value)) if value is not None else None
    except ValueError:
        return None
