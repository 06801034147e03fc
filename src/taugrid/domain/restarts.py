"""How an attempt failed, and whether the run restarts (DESIGN.md 3.1). Pure.

The restart policy (``restart: {max, on, backoff}`` in tau.yaml) names failure *groups*:
``error`` (the workload failed: a non-zero exit, a signal, OOM, a vanished supervisor),
``preemption`` and ``hardware``. Some failures never restart: a command that cannot be
started (exit 126/127: restarting a typo only wastes a GPU), a timeout (the budget is
spent), a cancel, and the disk (``disk``: over the run's own limit, or the disk full):
a restart writes the same files again into the same space, so it fails again, and on a
full disk it takes the space other runs need to finish; `tau resume` after freeing space.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from taugrid.domain.outcomes import AttemptExit, Verdict
from taugrid.domain.states import Reason

MAX_BACKOFF_S = 3600.0
COMMAND_NOT_RUNNABLE = frozenset({126, 127})  # what shells return for "cannot execute"


class FailureClass(StrEnum):
    EXIT_CODE = "exit_code"
    SIGNAL = "signal"
    OOM = "oom"
    PREEMPTED = "preempted"
    HARDWARE = "hardware"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    LOST = "lost"
    START_FAILED = "start_failed"
    DISK = "disk"


F = FailureClass
_GROUP: dict[FailureClass, str] = {
    F.EXIT_CODE: "error",
    F.SIGNAL: "error",
    F.OOM: "error",
    F.LOST: "error",
    F.PREEMPTED: "preemption",
    F.HARDWARE: "hardware",
}


def failure_class(ex: AttemptExit, verdict: Verdict) -> FailureClass | None:
    """The class of a failed attempt from its exit and the verdict; None on success."""
    if ex.outcome == "succeeded":
        return None
    by_reason = {
        Reason.CANCELLED: F.CANCELLED,
        Reason.TIMEOUT: F.TIMEOUT,
        Reason.LOST: F.LOST,
        Reason.START_FAILED: F.START_FAILED,
        Reason.OOM_KILLED: F.OOM,
        Reason.PREEMPTED: F.PREEMPTED,
        Reason.GPU_FAULT: F.HARDWARE,
        Reason.DISK_LIMIT_EXCEEDED: F.DISK,
        Reason.DISK_FULL: F.DISK,
    }
    if verdict.reason in by_reason:
        return by_reason[verdict.reason]
    if ex.signal is not None:
        return F.SIGNAL
    if ex.exit_code in COMMAND_NOT_RUNNABLE:
        return F.START_FAILED
    return F.EXIT_CODE


@dataclass(frozen=True)
class RestartPolicy:
    max: int
    on: frozenset[str]
    backoff_s: float


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    delay_s: float
    why: str  # a sentence for the event


def decide_restart(policy: RestartPolicy, used: int, cls: FailureClass) -> RestartDecision:
    """Restart after ``used`` automatic restarts so far? Exponential backoff: the n-th
    restart waits ``backoff * 2**(n-1)``, capped at an hour."""
    group = _GROUP.get(cls)
    if group is None:
        return RestartDecision(False, 0.0, f"{cls} failures are not restarted")
    if group not in policy.on:
        return RestartDecision(False, 0.0, f"restart.on does not include {group}")
    if used >= policy.max:
        return RestartDecision(False, 0.0, f"all {policy.max} restarts used")
    delay = min(policy.backoff_s * 2**used, max(MAX_BACKOFF_S, policy.backoff_s))
    return RestartDecision(True, delay, f"restart {used + 1} of {policy.max} in {_seconds(delay)}")


def decide_hardware_restart(policy: RestartPolicy) -> RestartDecision:
    """A hardware fault is the machine's, not the run's: the faulty GPU is out of service,
    so the next attempt lands on healthy ones. It restarts at once, uses none of
    ``restart.max`` (so it never exhausts it by itself, even at the default 0) and waits
    no backoff, unless ``restart.on`` was written without ``hardware``. It is bounded by
    the machine: each fault takes a GPU out."""
    if "hardware" not in policy.on:
        return RestartDecision(False, 0.0, "restart.on does not include hardware")
    return RestartDecision(
        True, 0.0, "restarting on healthy GPUs (a hardware fault uses no restart)"
    )


def requeue_after_preemption(policy: RestartPolicy) -> bool:
    """Preemption is the scheduler's doing, not the run's failure: a preempted run goes
    back to its queue (as in Kueue) without using a restart, unless ``restart.on`` was
    written without ``preemption``."""
    return "preemption" in policy.on


def _seconds(s: float) -> str:
    return f"{s:g}s" if s < 120 else f"{s / 60:.0f}m"
