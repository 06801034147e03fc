"""examples/pytorch-ddp-resume for real: 2 torchrun workers on gloo, checkpoints, resume.

No TauGrid server here: the command is built by ``launch_command`` exactly as the local
executor builds it for ``launcher: torchrun``, and started like the supervisor starts a
workload (own session, the environment of ``domain.workload_env`` plus the launcher's).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from servicecheck import require_module
from taugrid.domain.workload_env import WorkloadContext, submitter_env, workload_env
from taugrid.executors.local.launch import free_port, launch_command
from taugrid.sdk import checkpoint as sdk_checkpoint

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pytorch-ddp-resume"
RUN_TIMEOUT_S = 60  # per process; about 10 s on an idle 2-core machine


@pytest.fixture(scope="module", autouse=True)
def _needs_torch() -> None:
    require_module("torch", "torch is not installed (pip install -e '.[torch]'; `make test` does)")


@dataclass
class Attempt:
    dirs: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def checkpoints(self) -> Path:
        return self.dirs / "checkpoints"

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _spec() -> dict[str, Any]:
    spec = yaml.safe_load((EXAMPLE / "tau.yaml").read_text())
    assert isinstance(spec, dict)
    return spec


def _start(
    tmp: Path, *, attempt: int, extra_args: str = "", resume_from: str | None = None
) -> Attempt:
    """Start one attempt of the example in ``tmp`` (workdir, checkpoints, outputs)."""
    spec = _spec()
    workdir = tmp / "workdir"
    if not workdir.exists():
        shutil.copytree(EXAMPLE, workdir)
    adir = tmp / "attempts" / str(attempt)
    adir.mkdir(parents=True)
    command, launch_env = launch_command(
        f"{spec['command']} {extra_args}".strip(),
        launcher=str(spec["launcher"]),
        nodes=int(spec.get("nodes", 1)),
        gpu_indices=[],
        procs_per_node=(spec.get("resources") or {}).get("procs_per_node"),
        master_port=free_port(),
    )
    assert isinstance(command, list)
    # `python` in the command is looked up on the workload's PATH: this interpreter's.
    submitter = dict(os.environ)
    submitter["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    ctx = WorkloadContext(
        run_id="run-ddp-0001",
        run_name="pytorch-ddp-resume",
        workspace="default",
        attempt=attempt,
        checkpoint_dir=str(tmp / "checkpoints"),
        output_dir=str(tmp / "outputs"),
        metrics_file=str(adir / "metrics.jsonl"),
        gpu_indices=[],
        resume_from=resume_from,
    )
    env = workload_env(submitter_env(submitter), spec.get("env") or {}, ctx)
    env.setdefault("TAU_CHECKPOINT_KEEP", str(spec["checkpoint"]["keep"]))
    env.update(launch_env)
    log = adir / "output.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # as the supervisor does
        )
    return Attempt(tmp, proc, log)


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (torchrun puts each worker in its own session)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if fields[0] not in "ZX":
                parents[int(name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        frontier += kids
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the attempt's process group and every worker's, as a crash would."""
    workers = _descendants(proc.pid)
    groups = {proc.pid}
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers):  # orphans: init reaps them
        assert time.monotonic() < deadline, f"workers {workers} survived SIGKILL"
        time.sleep(0.02)


@pytest.fixture
def attempts() -> Iterator[list[Attempt]]:
    started: list[Attempt] = []
    yield started
    for a in started:
        if a.proc.poll() is None:  # not reaped: its pid still names it
            _kill_tree(a.proc)


def _finish(a: Attempt) -> str:
    try:
        a.proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_tree(a.proc)
        pytest.fail(f"the example did not finish in {RUN_TIMEOUT_S}s:\n{a.output}")
    assert a.proc.returncode == 0, a.output
    return a.output


def _final_loss(output: str) -> tuple[int, float]:
    m = re.search(r"^finished at step (\d+) loss ([0-9.]+)$", output, re.M)
    assert m, output
    return int(m.group(1)), float(m.group(2))


def _metrics(a: Attempt, attempt: int) -> list[tuple[int, dict[str, float]]]:
    lines = (a.dirs / "attempts" / str(attempt) / "metrics.jsonl").read_text().splitlines()
    return [(rec["step"], rec["values"]) for rec in map(json.loads, lines)]


def _sdk_env(monkeypatch: pytest.MonkeyPatch, checkpoints: Path) -> None:
    """What the SDK reads in this process: the checkpoints of the test's run, nothing else."""
    monkeypatch.setenv("TAU_CHECKPOINT_DIR", str(checkpoints))
    for name in ("TAU_RESUME_FROM", "TAU_ATTEMPT", "TAU_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Attempt, str]:
    """One complete run of the example as tau.yaml has it; shared by both tests."""
    a = _start(tmp_path_factory.mktemp("ddp-full"), attempt=0)
    try:
        return a, _finish(a)
    finally:
        if a.proc.poll() is None:
            _kill_tree(a.proc)


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_two_workers_train_checkpoint_and_log(
    uninterrupted: tuple[Attempt, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, out = uninterrupted
    assert "rank 0/2 started (backend gloo)" in out
    assert "rank 1/2 started (backend gloo)" in out
    assert "resumed from step" not in out
    step, loss = _final_loss(out)
    assert step == 60

    # A checkpoint every 10 steps, committed with a manifest that verifies; the SDK
    # keeps the newest `checkpoint.keep: 2`.
    names = sorted(p.name for p in a.checkpoints.iterdir())
    assert names == ["step-0000000050", "step-0000000060"], names
    for name in names:
        assert sdk_checkpoint.verify(a.checkpoints / name) is None
        assert (a.checkpoints / name / "state.pt").stat().st_size > 0
    _sdk_env(monkeypatch, a.checkpoints)
    latest = sdk_checkpoint.latest()
    assert latest is not None and latest.step == 60

    # Metrics from rank 0 only: the loss every 5 steps, then the held-out loss.
    metrics = _metrics(a, 0)
    assert [step for step, m in metrics if "loss" in m] == list(range(5, 61, 5))
    assert metrics[-1] == (60, {"val_loss": pytest.approx(loss, abs=1e-6)})
    assert metrics[-2][1]["loss"] < metrics[0][1]["loss"]  # it learned
    model = a.dirs / "outputs" / "model.pt"
    assert model.read_bytes()[:2] == b"PK"  # torch.save's zip format


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_killed_run_resumes_from_its_checkpoint(
    uninterrupted: tuple[Attempt, str],
    attempts: list[Attempt],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Slower steps (the same maths) leave time to kill it between two checkpoints.
    first = _start(tmp_path, attempt=0, extra_args="--step-time 0.1")
    attempts.append(first)
    _sdk_env(monkeypatch, first.checkpoints)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while (ckpt := sdk_checkpoint.latest()) is None:
        assert first.proc.poll() is None, first.output
        assert time.monotonic() < deadline, first.output
        time.sleep(0.05)
    _kill_tree(first.proc)  # kill -9 of everything: no chance to save anything more
    assert first.proc.returncode == -signal.SIGKILL
    assert "finished at step" not in first.output

    ckpt = sdk_checkpoint.latest()
    assert ckpt is not None and 10 <= ckpt.step < 60, first.output
    second = _start(tmp_path, attempt=1, resume_from=str(ckpt.path))
    attempts.append(second)
    out = _finish(second)
    assert f"resumed from step {ckpt.step}\n" in out
    assert next(step for step, m in _metrics(second, 1) if "loss" in m) > ckpt.step

    # Batches depend on the step alone and the optimizer state was restored: the resumed
    # run ends where the uninterrupted one did.
    step, loss = _final_loss(out)
    _, reference = _final_loss(uninterrupted[1])
    assert step == 60
    assert loss == pytest.approx(reference, rel=1e-3)
