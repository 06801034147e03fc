"""Collecting a sandboxed run's ``outputs:`` must not let links the workload planted make
the (root) supervisor write or read outside the run: the copy runs with the workload's
own identity and view. Before, the supervisor copied them itself, following the links."""

from __future__ import annotations

from pathlib import Path

import pytest
from tauproc import Tau, write_spec

from servicecheck import require_bwrap

WHY_BWRAP = "bubblewrap (bwrap) is needed for the workload sandbox"


@pytest.fixture
def sandboxed(tau: Tau) -> Tau:
    require_bwrap(WHY_BWRAP)
    tau.start_server("--isolation", "sandbox")
    return tau


def _finish(tau: Tau, name: str, command: str, outputs: str) -> str:
    write_spec(tau.cwd / name, f"name: {name}\ncommand: {command!r}\noutputs: {outputs}\n")
    run = str(tau.json("run", cwd=tau.cwd / name)["run"]["id"])
    tau.wait_state(run, {"SUCCEEDED", "FAILED"}, timeout=60)
    return run


def test_a_planted_link_in_outputs_does_not_make_the_copy_write_outside(
    sandboxed: Tau, tmp_path: Path
) -> None:
    tau = sandboxed
    target = tmp_path / "not-the-runs"  # the server user's directory, not the workload's
    target.mkdir()
    run = _finish(
        tau,
        "writer",
        f"mkdir -p out && echo evil > out/planted.txt && ln -s {target} $TAU_OUTPUT_DIR/out",
        "[out, out/planted.txt]",
    )
    assert list(target.iterdir()) == []
    status = tau.json("status", run)
    assert status["state"] == "SUCCEEDED"


def test_a_link_to_tau_home_does_not_make_the_copy_read_it(sandboxed: Tau) -> None:
    tau = sandboxed
    run = _finish(tau, "reader", f"ln -s {tau.home} home-link", "[home-link/token]")
    outputs = tau.home / "runs" / run / "outputs"
    assert not (outputs / "home-link" / "token").exists()
    token = tau.token()
    for path in outputs.rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path
