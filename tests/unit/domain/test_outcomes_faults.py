"""How supervisor faults are classified: OOM only when known, the disk, a lost supervisor."""

from __future__ import annotations

import signal

from taugrid.domain.outcomes import AttemptExit, classify_exit
from taugrid.domain.restarts import FailureClass, failure_class
from taugrid.domain.states import Reason, RunState


def test_sigkill_without_oom_evidence_is_the_signal_it_is() -> None:
    for oom in (None, False):
        ex = AttemptExit("failed", 137, signal.SIGKILL, oom=oom)
        v = classify_exit(ex)
        assert (v.state, v.reason) == (RunState.FAILED, Reason.EXIT_CODE)
        assert v.message == "killed by signal 9 (SIGKILL)"
        assert failure_class(ex, v) is FailureClass.SIGNAL


def test_known_oom_says_so_by_signal_or_by_exit_code() -> None:
    ex = AttemptExit("failed", 137, signal.SIGKILL, oom=True)
    v = classify_exit(ex)
    assert v.reason is Reason.OOM_KILLED and "OOM killer" in v.message
    assert "9 (SIGKILL)" in v.message
    assert failure_class(ex, v) is FailureClass.OOM
    # A shell whose child was OOM-killed exits 137 without a signal of its own.
    shell = AttemptExit("failed", 137, oom=True)
    assert classify_exit(shell).reason is Reason.OOM_KILLED
    assert "code 137" in classify_exit(shell).message


def test_oom_never_overrides_what_was_asked_for() -> None:
    # A cancel or a timeout stops the workload with signals; an OOM report then is noise.
    assert classify_exit(AttemptExit("cancelled", 137, 9, oom=True)).reason is Reason.CANCELLED
    assert classify_exit(AttemptExit("timeout", 137, 9, oom=True)).reason is Reason.TIMEOUT
    assert classify_exit(AttemptExit("succeeded", 0, oom=True)).reason is Reason.COMPLETED


def test_other_signals_name_number_and_name() -> None:
    v = classify_exit(AttemptExit("failed", 139, signal.SIGSEGV))
    assert v.message == "killed by signal 11 (SIGSEGV)"
    assert classify_exit(AttemptExit("failed", None, 77)).message == "killed by signal 77"


def test_disk_outcomes() -> None:
    limit = AttemptExit("disk_limit", 143, signal.SIGTERM, detail="uses 5.0 MiB, limit 1.0 MiB")
    v = classify_exit(limit)
    assert (v.state, v.reason, v.message) == (
        RunState.FAILED,
        Reason.DISK_LIMIT_EXCEEDED,
        "uses 5.0 MiB, limit 1.0 MiB",
    )
    assert failure_class(limit, v) is FailureClass.DISK
    full = AttemptExit("disk_full", 1, detail="the disk holding TAU_HOME is full (0 bytes free)")
    v = classify_exit(full)
    assert (v.reason, v.message) == (
        Reason.DISK_FULL,
        "the disk holding TAU_HOME is full (0 bytes free)",
    )
    assert failure_class(full, v) is FailureClass.DISK
    assert classify_exit(AttemptExit("disk_full", 1)).message.startswith("the disk holding")


def test_lost_and_cancelled_carry_the_executors_detail() -> None:
    lost = AttemptExit("lost", None, error="the supervisor vanished", detail="2 processes stopped")
    assert classify_exit(lost).message == "the supervisor vanished; 2 processes stopped"
    cancelled = AttemptExit("cancelled", None, detail="its supervisor had vanished")
    v = classify_exit(cancelled)
    assert v.state is RunState.CANCELLED
    assert v.message == "cancelled by request (its supervisor had vanished)"
