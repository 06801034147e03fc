"""Stopping a sandboxed workload keeps the semantics of an unsandboxed one: SIGTERM
reaches the workload (not just bubblewrap, which would take the sandbox down at once),
``stop_grace`` is honoured both ways, and the exit status recorded is the workload's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from tauproc import Tau, write_spec

from servicecheck import require_bwrap

WHY_BWRAP = "bubblewrap (bwrap) is needed for the workload sandbox"
TRAPS = (
    "trap 'sleep 1; echo marker > $TAU_OUTPUT_DIR/marker; exit 0' TERM; "
    "echo ready; while :; do sleep 0.1; done"
)
IGNORES = "trap '' TERM; echo ready; while :; do sleep 0.1; done"


@pytest.fixture
def sandboxed(tau: Tau) -> Iterator[Tau]:
    require_bwrap(WHY_BWRAP)
    tau.start_server("--isolation", "sandbox")
    yield tau


def _start(tau: Tau, name: str, command: str, grace: str) -> str:
    write_spec(tau.cwd / name, f"name: {name}\ncommand: {command!r}\nstop_grace: {grace}\n")
    run = str(tau.json("run", cwd=tau.cwd / name)["run"]["id"])
    tau.wait_state(run, {"RUNNING"})
    deadline = time.monotonic() + 20
    while "ready" not in tau("logs", run).stdout:  # its trap is installed
        assert time.monotonic() < deadline, tau("logs", run).stdout
        time.sleep(0.05)
    return run


def _attempt(tau: Tau, run: str) -> dict[str, Any]:
    data = tau.json("status", run)
    attempt: dict[str, Any] = data["attempt_list"][-1]
    return attempt


def test_cancel_sends_sigterm_to_the_workload_and_waits_for_it(sandboxed: Tau) -> None:
    tau = sandboxed
    run = _start(tau, "traps", TRAPS, "20s")
    t0 = time.monotonic()
    tau("cancel", run, check=True)
    data = tau.wait_state(run, {"CANCELLED", "FAILED", "SUCCEEDED"}, timeout=30)
    took = time.monotonic() - t0
    assert data["state"] == "CANCELLED"
    assert (tau.home / "runs" / run / "outputs" / "marker").read_text() == "marker\n"
    attempt = _attempt(tau, run)
    assert (attempt["exit_code"], attempt["signal"]) == (0, None)  # its own clean exit
    assert took >= 1.0  # it had its second: not killed with the sandbox at once


def test_stop_grace_ends_with_sigkill(sandboxed: Tau) -> None:
    tau = sandboxed
    run = _start(tau, "ignores", IGNORES, "1s")
    t0 = time.monotonic()
    tau("cancel", run, check=True)
    data = tau.wait_state(run, {"CANCELLED", "FAILED", "SUCCEEDED"}, timeout=30)
    took = time.monotonic() - t0
    assert data["state"] == "CANCELLED"
    attempt = _attempt(tau, run)
    assert (attempt["exit_code"], attempt["signal"]) == (137, 9)
    assert 1.0 <= took < 15


def test_a_workload_killed_by_a_signal_reports_that_signal(sandboxed: Tau) -> None:
    tau = sandboxed
    write_spec(tau.cwd / "sig", "name: sig\ncommand: [sh, -c, 'kill -USR1 $$']\n")
    run = str(tau.json("run", cwd=tau.cwd / "sig")["run"]["id"])
    data = tau.wait_state(run, {"FAILED", "SUCCEEDED", "CANCELLED"}, timeout=30)
    assert data["state"] == "FAILED"
    attempt = _attempt(tau, run)
    assert (attempt["exit_code"], attempt["signal"]) == (138, 10)
    assert attempt["message"] == "killed by signal 10 (SIGUSR1)"
    write_spec(tau.cwd / "code", "name: code\ncommand: [sh, -c, 'exit 3']\n")
    run = str(tau.json("run", cwd=tau.cwd / "code")["run"]["id"])
    tau.wait_state(run, {"FAILED"}, timeout=30)
    assert (_attempt(tau, run)["exit_code"], _attempt(tau, run)["signal"]) == (3, None)
    write_spec(tau.cwd / "nf", "name: nf\ncommand: [/nonexistent/tool]\n")
    run = str(tau.json("run", cwd=tau.cwd / "nf")["run"]["id"])
    tau.wait_state(run, {"FAILED"}, timeout=30)
    assert _attempt(tau, run)["reason"] == "StartFailed"
