"""The attempt lifecycle's decisions, as pure functions over plain data."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from taugrid.domain.lifecycle import (
    STOP_CLEARED,
    AttemptFacts,
    Observation,
    Phase,
    on_observation,
    on_restart_due,
    stop_to_send,
    stopped_before_launch,
)
from taugrid.domain.outcomes import AttemptExit
from taugrid.domain.restarts import RestartPolicy
from taugrid.domain.states import Reason, RunState
from taugrid.domain.stops import StopReason, StopRequest

S = RunState
EVERYTHING = RestartPolicy(max=3, on=frozenset({"error", "preemption", "hardware"}), backoff_s=0)


def facts(**kw: object) -> AttemptFacts:
    base: dict[str, object] = {
        "run_id": "r",
        "state": S.RUNNING,
        "attempt": 0,
        "run_started": True,
        "restarts": 0,
        "cancel_requested": False,
        "stop": None,
        "policy": EVERYTHING,
    }
    base.update(kw)
    return AttemptFacts(**base)  # type: ignore[arg-type]


def ended(ex: AttemptExit) -> Observation:
    return Observation(Phase.EXITED, started_at=1.0, finished_at=2.0, exit=ex)


def test_starting_decides_nothing_and_running_follows_metrics() -> None:
    assert on_observation(facts(), Observation(Phase.STARTING), 5.0).steps == ()
    running = on_observation(facts(), Observation(Phase.RUNNING, started_at=1.0), 5.0)
    assert running.track_metrics and running.steps == ()


def test_the_first_start_stamps_the_run_and_each_attempt_its_own() -> None:
    d = on_observation(
        facts(state=S.ADMITTED, run_started=False), Observation(Phase.RUNNING, 3.0), 5.0
    )
    (step,) = d.steps
    assert (step.to, step.fields, step.attempt_update) == (
        S.RUNNING,
        {"started_at": 3.0},
        {"started_at": 3.0},
    )
    again = on_observation(facts(state=S.ADMITTED), Observation(Phase.RUNNING, 4.0), 5.0)
    assert again.steps[0].fields == {}


def test_a_vanished_supervisor_is_noted_once() -> None:
    obs = Observation(Phase.STOPPING, detail="stopping 2 leftover processes")
    assert on_observation(facts(), obs, 1.0).note == (Reason.SUPERVISOR_LOST, obs.detail)
    assert on_observation(facts(lost_noted=True), obs, 1.0).note is None


def test_a_cancel_wins_over_every_other_stop() -> None:
    stop = StopRequest(StopReason.HARDWARE, 1.0, "Xid 79", fault_at=1.0)
    f = facts(cancel_requested=True, stop=stop)
    assert stop_to_send(f) is StopReason.CANCEL
    d = on_observation(f, ended(AttemptExit("cancelled", None, stop_reason=StopReason.CANCEL)), 3)
    assert d.steps[-1].to == S.CANCELLED and d.finished


def test_preemption_and_drain_requeue_without_a_restart() -> None:
    for reason in (StopReason.PREEMPT, StopReason.DRAIN):
        f = facts(stop=StopRequest(reason, 1.0, "room for a higher-priority run"))
        d = on_observation(f, ended(AttemptExit("cancelled", None, stop_reason=reason)), 3.0)
        assert [s.to for s in d.steps] == [S.PREEMPTED, S.QUEUED]
        assert "restarts" not in d.steps[0].fields and not d.finished
        assert d.steps[0].attempt_update is not None
        assert d.steps[0].attempt_update["stop_reason"] == reason.value


def test_a_hardware_stop_restarts_as_hardware_and_keeps_the_fault_time() -> None:
    f = facts(stop=StopRequest(StopReason.HARDWARE, 9.0, "Xid 79", fault_at=7.5))
    d = on_observation(f, ended(AttemptExit("failed", 134, signal=6)), 10.0)
    (step,) = d.steps
    assert step.to == S.RESTARTING and step.reason == Reason.GPU_FAULT
    assert step.attempt_update is not None
    assert step.attempt_update["failure_class"] == "hardware"
    assert step.attempt_update["fault_at"] == 7.5
    # The machine's fault, not the run's: no restart of max used, no backoff waited.
    assert step.fields["restarts"] == 0
    assert step.fields["next_attempt_at"] == 2.0  # when the attempt ended: no backoff


def test_a_hardware_stop_restarts_even_with_every_restart_used_unless_on_says_no() -> None:
    from taugrid.domain.restarts import RestartPolicy

    stop = StopRequest(StopReason.HARDWARE, 9.0, "Xid 79", fault_at=7.5)
    spent = facts(stop=stop, restarts=3, policy=RestartPolicy(3, frozenset({"hardware"}), 30.0))
    (step,) = on_observation(spent, ended(AttemptExit("failed", 1)), 10.0).steps
    assert step.to == S.RESTARTING and step.fields["restarts"] == 3
    never = facts(stop=stop, policy=RestartPolicy(5, frozenset({"error"}), 30.0))
    d = on_observation(never, ended(AttemptExit("failed", 1)), 10.0)
    assert d.steps[-1].to == S.FAILED and "restart.on does not include hardware" in (
        d.steps[-1].message
    )


def test_a_hardware_stop_after_success_is_a_success() -> None:
    f = facts(stop=StopRequest(StopReason.HARDWARE, 9.0, "Xid 79", fault_at=7.5))
    d = on_observation(f, ended(AttemptExit("succeeded", 0)), 10.0)
    assert d.steps[-1].to == S.SUCCEEDED


def test_stopped_before_launch_ends_as_its_stop_says() -> None:
    cancel = stopped_before_launch(facts(state=S.ADMITTED, cancel_requested=True), 1.0)
    assert cancel.steps[-1].to == S.CANCELLED
    pre = facts(state=S.ADMITTED, stop=StopRequest(StopReason.PREEMPT, 1.0, "room"))
    assert [s.to for s in stopped_before_launch(pre, 1.0).steps] == [S.PREEMPTED, S.QUEUED]


def test_a_restart_waits_for_its_backoff() -> None:
    assert on_restart_due(2, 10.0, 9.0) is None
    step = on_restart_due(2, 10.0, 10.0)
    assert step is not None and step.to == S.QUEUED and step.fields == {"next_attempt_at": None}


outcomes = st.sampled_from(["succeeded", "failed", "cancelled", "timeout", "lost", "disk_limit"])
reasons = st.none() | st.sampled_from(list(StopReason))


@given(outcomes, reasons, st.booleans(), st.integers(0, 4))
def test_every_end_clears_the_stop_and_a_cancel_never_restarts(
    outcome: str, reason: StopReason | None, cancelled: bool, used: int
) -> None:
    stop = StopRequest(reason, 1.0, "why", fault_at=0.5) if reason else None
    f = facts(cancel_requested=cancelled, stop=stop, restarts=used)
    ex = AttemptExit(outcome, 1 if outcome == "failed" else None, stop_reason=reason)
    d = on_observation(f, ended(ex), 3.0)
    first = d.steps[0]
    assert {k: first.fields.get(k) for k in STOP_CLEARED} == dict(STOP_CLEARED)
    if cancelled:
        assert all(s.to != S.RESTARTING for s in d.steps)
    if (
        reason is StopReason.HARDWARE
        and outcome != "succeeded"
        and not (cancelled and outcome == "cancelled")
    ):
        assert first.attempt_update is not None
        assert first.attempt_update["failure_class"] == "hardware"
    assert d.finished == d.steps[-1].to.terminal
