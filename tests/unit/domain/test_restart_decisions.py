import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taugrid.domain.outcomes import AttemptExit, classify_exit
from taugrid.domain.restarts import (
    MAX_BACKOFF_S,
    FailureClass,
    RestartPolicy,
    decide_restart,
    failure_class,
    requeue_after_preemption,
)
from taugrid.domain.states import Reason

F = FailureClass
ALL = frozenset({"error", "preemption", "hardware"})


def _cls(ex: AttemptExit) -> FailureClass | None:
    return failure_class(ex, classify_exit(ex))


@pytest.mark.parametrize(
    ("ex", "cls"),
    [
        (AttemptExit("succeeded", 0), None),
        (AttemptExit("failed", 1), F.EXIT_CODE),
        (AttemptExit("failed", 127), F.START_FAILED),
        (AttemptExit("failed", 126), F.START_FAILED),
        (AttemptExit("failed", None, error="no such file"), F.START_FAILED),
        (AttemptExit("failed", None, signal=signal.SIGSEGV), F.SIGNAL),
        # A SIGKILL alone is not an OOM (kill -9 sends one too); only a known OOM is.
        (AttemptExit("failed", None, signal=signal.SIGKILL), F.SIGNAL),
        (AttemptExit("failed", None, signal=signal.SIGKILL, oom=None), F.SIGNAL),
        (AttemptExit("failed", 137, signal=signal.SIGKILL, oom=True), F.OOM),
        (AttemptExit("failed", 137, oom=True), F.OOM),
        (AttemptExit("disk_limit", 143, signal=signal.SIGTERM), F.DISK),
        (AttemptExit("disk_full", 1), F.DISK),
        (AttemptExit("timeout", None, signal=signal.SIGTERM), F.TIMEOUT),
        (AttemptExit("cancelled", None, signal=signal.SIGTERM), F.CANCELLED),
        (AttemptExit("lost", None, error="gone"), F.LOST),
    ],
)
def test_failure_classes(ex: AttemptExit, cls: FailureClass | None) -> None:
    assert _cls(ex) == cls


def test_command_not_found_is_a_start_failure_with_a_clear_message() -> None:
    v = classify_exit(AttemptExit("failed", 127))
    assert v.reason is Reason.START_FAILED and "command not found" in v.message


def test_restart_with_exponential_backoff_until_max() -> None:
    pol = RestartPolicy(max=3, on=ALL, backoff_s=10)
    got = [decide_restart(pol, used, F.EXIT_CODE) for used in range(4)]
    assert [d.restart for d in got] == [True, True, True, False]
    assert [d.delay_s for d in got[:3]] == [10, 20, 40]
    assert got[0].why == "restart 1 of 3 in 10s"
    assert got[3].why == "all 3 restarts used"


@pytest.mark.parametrize("cls", [F.START_FAILED, F.TIMEOUT, F.CANCELLED, F.DISK])
def test_some_failures_never_restart(cls: FailureClass) -> None:
    d = decide_restart(RestartPolicy(max=5, on=ALL, backoff_s=0), 0, cls)
    assert not d.restart and "not restarted" in d.why


def test_restart_only_for_groups_in_on() -> None:
    pol = RestartPolicy(max=5, on=frozenset({"hardware"}), backoff_s=0)
    assert not decide_restart(pol, 0, F.OOM).restart
    assert decide_restart(pol, 0, F.HARDWARE).restart
    assert decide_restart(pol, 0, F.HARDWARE).delay_s == 0
    assert not requeue_after_preemption(pol)
    assert requeue_after_preemption(RestartPolicy(max=0, on=ALL, backoff_s=0))


@given(st.integers(0, 50), st.floats(0, 10_000, allow_nan=False), st.sampled_from(list(F)))
def test_backoff_is_bounded_and_restarts_never_exceed_max(
    used: int, backoff: float, cls: FailureClass
) -> None:
    pol = RestartPolicy(max=10, on=ALL, backoff_s=backoff)
    d = decide_restart(pol, used, cls)
    if d.restart:
        assert used < 10
        assert 0 <= d.delay_s <= max(MAX_BACKOFF_S, backoff)
