"""The seam between the control plane and whatever runs processes.

The server speaks only these types; the local executor (processes under a supervisor)
implements them now, the Kubernetes executor later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from taugrid.domain.outcomes import AttemptExit


@dataclass(frozen=True)
class LaunchRequest:
    run_id: str
    attempt: int
    snapshot: Path  # content-addressed archive of the workdir
    command: list[str] | str  # argv, or a shell command line
    setup: str | None
    env: dict[str, str]  # the complete environment of the workload
    stop_grace_s: float
    timeout_s: float | None
    outputs: list[str] = field(default_factory=list)
    secret_files: dict[str, str] = field(default_factory=dict)  # env name -> file with the value
    disk_limit_bytes: int | None = None  # the run's files may take this much (resources.disk)


@dataclass(frozen=True)
class Observation:
    """What the executor sees of one attempt right now."""

    phase: str  # starting | running | stopping | exited
    started_at: float | None = None
    finished_at: float | None = None
    exit: AttemptExit | None = None
    pid: int | None = None
    # phase "stopping": the supervisor vanished and leftover processes are being stopped;
    # the run keeps its resources meanwhile. ``detail`` says so in words.
    detail: str | None = None


class Executor(Protocol):
    def launch(self, req: LaunchRequest) -> None: ...

    def observe(self, run_id: str, attempt: int) -> Observation: ...

    def cancel(self, run_id: str, attempt: int) -> bool: ...

    def log_path(self, run_id: str, attempt: int) -> Path: ...

    def output_dir(self, run_id: str) -> Path: ...

    def checkpoint_dir(self, run_id: str) -> Path: ...

    def metrics_file(self, run_id: str, attempt: int) -> Path: ...
