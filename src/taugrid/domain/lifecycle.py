"""The attempt lifecycle as decisions: facts of a run + what the executor observes →
the transitions to write, and what to do once they are durable. Pure.

The engine gathers the facts, calls one of these functions and applies what it returns
(one write transaction per pass, then effects); it decides nothing itself. Everything
about *why* an attempt ended comes in as data: the exit the executor observed, the stop
the control plane recorded (``StopRequest``) and the reason the executor reported with
the exit (``AttemptExit.stop_reason``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from taugrid.domain.outcomes import AttemptExit, Verdict, classify_exit
from taugrid.domain.restarts import (
    FailureClass,
    RestartPolicy,
    decide_hardware_restart,
    decide_restart,
    failure_class,
    requeue_after_preemption,
)
from taugrid.domain.states import Reason, RunState
from taugrid.domain.stops import REQUEUED, StopReason, StopRequest

S = RunState
DEFAULT_PREEMPT_MESSAGE = "preempted to make room for a higher-priority run"
# The run's columns that hold a pending stop; every end of an attempt clears them, so a
# stop meant for one attempt can never reach the next.
STOP_CLEARED: Mapping[str, Any] = {
    "stop_requested_at": None,
    "stop_reason": None,
    "stop_message": None,
    "stop_fault_at": None,
}


class Phase(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    # The attempt's supervisor (or pod) vanished and leftover processes are being
    # stopped; the run keeps its resources meanwhile. ``detail`` says so in words.
    STOPPING = "stopping"
    EXITED = "exited"


@dataclass(frozen=True)
class Observation:
    """What the executor sees of one attempt right now."""

    phase: Phase | str
    started_at: float | None = None
    finished_at: float | None = None
    exit: AttemptExit | None = None
    pid: int | None = None
    detail: str | None = None


@dataclass(frozen=True)
class AttemptFacts:
    """What a decision needs to know of a run whose current attempt is ``attempt``."""

    run_id: str
    state: RunState
    attempt: int
    run_started: bool  # the run has a started_at (set by its first attempt)
    restarts: int  # automatic restarts used so far
    cancel_requested: bool  # a person asked to cancel: nothing restarts it
    stop: StopRequest | None  # the control plane's stop for this attempt, if any
    policy: RestartPolicy
    lost_noted: bool = False  # the "supervisor lost" event for this attempt is written


@dataclass(frozen=True)
class Step:
    """One transition as the store writes it (``store.runs.Move`` without the run id)."""

    to: RunState
    reason: Reason
    message: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    attempt_update: Mapping[str, Any] | None = None  # the attempt current before the step
    new_attempt: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Decision:
    """``steps`` are written in order in one transaction; the rest is done once they are."""

    steps: tuple[Step, ...] = ()
    note: tuple[Reason, str] | None = None  # an event without a transition
    final_metrics: bool = False  # the attempt's last metrics ride with the first step
    track_metrics: bool = False  # still running: follow its metrics
    finished: bool = False  # the run reached a terminal state: its files can be tidied


NOTHING = Decision()


def stop_to_send(facts: AttemptFacts) -> StopReason | None:
    """The stop the executor must be given for the current attempt, if any (a person's
    cancel wins over the control plane's own reasons)."""
    if facts.cancel_requested:
        return StopReason.CANCEL
    return facts.stop.reason if facts.stop is not None else None


def on_observation(facts: AttemptFacts, obs: Observation, now: float) -> Decision:
    """What follows from one observation of a launched attempt."""
    if obs.phase == Phase.STARTING:
        return NOTHING
    steps: list[Step] = []
    if facts.state == S.ADMITTED and obs.started_at is not None:
        steps.append(
            Step(
                S.RUNNING,
                Reason.STARTED,
                "process started",
                # The run started with its first attempt; each attempt keeps its own.
                fields={} if facts.run_started else {"started_at": obs.started_at},
                attempt_update={"started_at": obs.started_at},
            )
        )
    if obs.phase == Phase.STOPPING:  # still holds its GPUs until its processes are gone
        note = None if facts.lost_noted else (Reason.SUPERVISOR_LOST, obs.detail or "lost")
        return Decision(steps=tuple(steps), note=note)
    if obs.phase == Phase.EXITED and obs.exit is not None:
        ended = _ended(facts, obs.exit, obs.finished_at or now)
        return Decision(steps=(*steps, *ended.steps), final_metrics=True, finished=ended.finished)
    return Decision(steps=tuple(steps), track_metrics=True)


def stopped_before_launch(facts: AttemptFacts, now: float) -> Decision:
    """An admitted attempt that was never launched and has a stop: it ends as if the
    executor had stopped it at once (cancelled, requeued, or restarted after a fault)."""
    reason = stop_to_send(facts)
    ended = _ended(facts, AttemptExit("cancelled", None, stop_reason=reason), now)
    return Decision(steps=ended.steps, finished=ended.finished)


def on_start_failed(error: str, now: float) -> Decision:
    """The executor refused or failed the launch: the run fails visibly, never hangs."""
    message = f"could not start: {error}"
    return Decision(
        steps=(
            Step(
                S.FAILED,
                Reason.START_FAILED,
                message,
                fields={"finished_at": now, **STOP_CLEARED},
                attempt_update={
                    "finished_at": now,
                    "outcome": "failed",
                    "reason": Reason.START_FAILED.value,
                    "failure_class": FailureClass.START_FAILED.value,
                    "message": message,
                },
            ),
        ),
        finished=True,
    )


def on_submit_failed(error: str, now: float) -> Decision:
    """Creating a queued run's next attempt for a cluster's admitter failed: the run
    fails visibly. No attempt row exists yet (it is made at admission), so none changes."""
    return Decision(
        steps=(
            Step(
                S.FAILED,
                Reason.START_FAILED,
                f"could not submit to the cluster: {error}",
                fields={"finished_at": now, **STOP_CLEARED},
            ),
        ),
        finished=True,
    )


def on_restart_due(attempt_count: int, next_attempt_at: float | None, now: float) -> Step | None:
    """A RESTARTING run goes back to its queue once its backoff has passed (it keeps its
    place: submit order)."""
    if (next_attempt_at or 0.0) > now:
        return None
    return Step(
        S.QUEUED,
        Reason.RESTARTING,
        f"restarting as attempt {attempt_count}",
        fields={"next_attempt_at": None},
    )


def on_admitted(
    queue: str, flavor: str, placement: Mapping[str, Any], location: str, how: str
) -> Step:
    """QUEUED → ADMITTED with a new attempt placed as the admitter said (``how``: by
    whom, for the message)."""
    gpus = placement.get("gpus") or []
    shown = ",".join(map(str, gpus)) or "none"
    return Step(
        S.ADMITTED,
        Reason.ADMITTED,
        f"admitted to {queue} on flavor {flavor} (GPUs: {shown}){how}",
        fields={"flavor": flavor},
        new_attempt={"placement": dict(placement), "attempt_dir": location},
    )


# -- how an attempt ended ------------------------------------------------------------------
@dataclass(frozen=True)
class _Ended:
    steps: tuple[Step, ...]
    finished: bool


def _ended(f: AttemptFacts, ex: AttemptExit, now: float) -> _Ended:
    reason = StopReason.CANCEL if f.cancel_requested else ex.stop_reason
    if reason is None and f.stop is not None:
        reason = f.stop.reason  # an executor that could not say why it stopped
    stopped = ex.outcome == "cancelled"  # ended because it was stopped, not by itself
    if reason in REQUEUED and stopped:
        return _preempted(f, ex, now, reason)
    hardware = StopReason.HARDWARE in (ex.stop_reason, f.stop.reason if f.stop else None)
    if hardware and ex.outcome != "succeeded" and not (stopped and f.cancel_requested):
        # A workload often crashes on a GPU fault before the stop reaches it: that is the
        # fault's doing too, never the user's error (a person's cancel still ends it).
        return _hardware(f, ex, now)
    if reason is StopReason.TIMEOUT and stopped:
        ex = AttemptExit("timeout", ex.exit_code, ex.signal, detail=ex.detail)
    verdict = classify_exit(ex)
    cls = failure_class(ex, verdict)
    update = _attempt_update(ex, now, verdict, cls, ex.outcome, reason)
    if cls is not None and not f.cancel_requested:
        decision = decide_restart(f.policy, f.restarts, cls)
        if decision.restart:
            return _restart(f, ex, now, verdict, decision.delay_s, decision.why, update)
        if f.policy.max > 0:
            verdict = Verdict(verdict.state, verdict.reason, f"{verdict.message}; {decision.why}")
            update = {**update, "message": verdict.message}
    return _final(verdict, ex, now, update)


def _preempted(f: AttemptFacts, ex: AttemptExit, now: float, reason: StopReason) -> _Ended:
    msg = f.stop.message if f.stop is not None and f.stop.message else DEFAULT_PREEMPT_MESSAGE
    verdict = Verdict(S.PREEMPTED, Reason.PREEMPTED, msg)
    update = _attempt_update(ex, now, verdict, FailureClass.PREEMPTED, "preempted", reason)
    if not requeue_after_preemption(f.policy):
        verdict = Verdict(S.FAILED, Reason.PREEMPTED, f"{msg}; restart.on has no preemption")
        return _final(verdict, ex, now, {**update, "message": verdict.message})
    # PREEMPTED, then back in its queue; it restarts as a new attempt when admitted again.
    return _Ended(
        (
            Step(
                S.PREEMPTED,
                Reason.PREEMPTED,
                msg,
                fields={**STOP_CLEARED, "flavor": None},
                attempt_update=update,
            ),
            Step(S.QUEUED, Reason.QUEUED, "requeued after preemption"),
        ),
        finished=False,
    )


def _hardware(f: AttemptFacts, ex: AttemptExit, now: float) -> _Ended:
    why = f.stop.message if f.stop is not None and f.stop.message else "a hardware fault"
    verdict = Verdict(S.FAILED, Reason.GPU_FAULT, f"stopped by a hardware fault: {why}")
    update = _attempt_update(ex, now, verdict, FailureClass.HARDWARE, "hardware", None)
    update = {
        **update,
        "stop_reason": StopReason.HARDWARE.value,
        "fault_at": f.stop.fault_at if f.stop is not None and f.stop.fault_at else now,
    }
    if f.cancel_requested:  # a person asked for it to end: no restart
        return _final(verdict, ex, now, update)
    decision = decide_hardware_restart(f.policy)
    if decision.restart:
        return _restart(f, ex, now, verdict, decision.delay_s, decision.why, update, uses=0)
    verdict = Verdict(verdict.state, verdict.reason, f"{verdict.message}; {decision.why}")
    return _final(verdict, ex, now, {**update, "message": verdict.message})


def _restart(
    f: AttemptFacts,
    ex: AttemptExit,
    now: float,
    verdict: Verdict,
    delay_s: float,
    why: str,
    update: Mapping[str, Any],
    *,
    uses: int = 1,  # of restart.max (a hardware restart uses none)
) -> _Ended:
    step = Step(
        S.RESTARTING,
        verdict.reason,
        f"{verdict.message}; {why}",
        fields={
            "restarts": f.restarts + uses,
            "next_attempt_at": now + delay_s,
            "exit_code": ex.exit_code,
            **STOP_CLEARED,
        },
        attempt_update=update,
    )
    return _Ended((step,), finished=False)


def _final(verdict: Verdict, ex: AttemptExit, now: float, update: Mapping[str, Any]) -> _Ended:
    step = Step(
        verdict.state,
        verdict.reason,
        verdict.message,
        fields={"finished_at": now, "exit_code": ex.exit_code, **STOP_CLEARED},
        attempt_update=update,
    )
    return _Ended((step,), finished=verdict.state.terminal)


def _attempt_update(
    ex: AttemptExit,
    now: float,
    verdict: Verdict,
    cls: FailureClass | None,
    outcome: str | None,
    stop: StopReason | None,
) -> dict[str, Any]:
    return {
        "finished_at": now,
        "exit_code": ex.exit_code,
        "signal": ex.signal,
        "outcome": outcome,
        "reason": verdict.reason.value,
        "failure_class": cls.value if cls else None,
        "message": verdict.message,
        "stop_reason": stop.value if stop is not None else None,
    }
