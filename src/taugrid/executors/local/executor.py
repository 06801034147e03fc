"""Local executor: one supervisor process per attempt, state exchanged through files.

Layout under ``$TAU_HOME/runs/<run_id>/``: ``workdir/`` (the unpacked snapshot, shared
by attempts), ``outputs/`` (TAU_OUTPUT_DIR), ``checkpoints/`` and
``attempts/<k>/`` holding ``launch.json``, ``status.json``, ``supervisor.pid`` and
``output.log``. The files, not the server's memory, are the truth about a process, which
is why runs survive a server crash.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from taugrid.domain.outcomes import AttemptExit
from taugrid.executors.base import LaunchRequest, Observation
from taugrid.executors.local import process
from taugrid.executors.local.files import write_json_atomic
from taugrid.executors.local.snapshot import unpack_snapshot

# A supervisor that has not written its pid this long after launch never started.
START_DEADLINE_S = 30.0


class LocalExecutor:
    def __init__(
        self,
        runs_root: Path,
        *,
        python: str = sys.executable,
        notify_url: str | None = None,
        token_file: Path | None = None,
    ) -> None:
        self.runs_root = runs_root
        self.python = python
        self.notify_url = notify_url
        self.token_file = token_file

    def run_dir(self, run_id: str) -> Path:
        return self.runs_root / run_id

    def attempt_dir(self, run_id: str, attempt: int) -> Path:
        return self.run_dir(run_id) / "attempts" / str(attempt)

    def log_path(self, run_id: str, attempt: int) -> Path:
        return self.attempt_dir(run_id, attempt) / "output.log"

    def output_dir(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "outputs"

    def checkpoint_dir(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "checkpoints"

    def metrics_file(self, run_id: str, attempt: int) -> Path:
        return self.attempt_dir(run_id, attempt) / "metrics.jsonl"

    def workdir(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "workdir"

    def launch(self, req: LaunchRequest) -> None:
        workdir = self.workdir(req.run_id)
        if not workdir.exists():
            unpack_snapshot(req.snapshot, workdir)
        adir = self.attempt_dir(req.run_id, req.attempt)
        adir.mkdir(parents=True, exist_ok=True)
        for d in (self.output_dir(req.run_id), self.checkpoint_dir(req.run_id)):
            d.mkdir(parents=True, exist_ok=True)
        notify = None
        if self.notify_url and self.token_file:
            notify = {"url": self.notify_url, "token_file": str(self.token_file)}
        write_json_atomic(
            adir / "launch.json",
            {
                "command": req.command,
                "setup": req.setup,
                "cwd": str(workdir),
                "env": req.env,
                "stop_grace_s": req.stop_grace_s,
                "timeout_s": req.timeout_s,
                "outputs": req.outputs,
                "secret_files": req.secret_files,
                "output_dir": str(self.output_dir(req.run_id)),
                "notify": notify,
                "launched_at": time.time(),
            },
        )
        process.start_supervisor(adir, python=self.python)

    def observe(self, run_id: str, attempt: int) -> Observation:
        adir = self.attempt_dir(run_id, attempt)
        status = process.read_status(adir)
        if status and status.get("phase") == "exited":
            return Observation(
                phase="exited",
                started_at=status.get("started_at"),
                finished_at=status.get("finished_at"),
                pid=status.get("pid"),
                exit=AttemptExit(
                    outcome=str(status.get("outcome")),
                    exit_code=status.get("exit_code"),
                    signal=status.get("signal"),
                    error=status.get("error"),
                ),
            )
        spid = process.read_supervisor_pid(adir)
        if spid is not None and not process.pid_alive(spid):
            # Re-read: the supervisor may have written its final status just before exiting.
            status = process.read_status(adir)
            if status and status.get("phase") == "exited":
                return self.observe(run_id, attempt)
            return _lost("the run's supervisor exited without recording the result")
        if spid is None and not _recently_launched(adir):
            return _lost("the run's supervisor never started")
        if status and status.get("phase") == "running":
            return Observation(
                phase="running", started_at=status.get("started_at"), pid=status.get("pid")
            )
        return Observation(phase="starting")

    def is_launched(self, run_id: str, attempt: int) -> bool:
        return (self.attempt_dir(run_id, attempt) / "launch.json").exists()

    def cancel(self, run_id: str, attempt: int) -> bool:
        return process.request_cancel(self.attempt_dir(run_id, attempt))


def _lost(why: str) -> Observation:
    return Observation(
        phase="exited",
        finished_at=time.time(),
        exit=AttemptExit(outcome="lost", exit_code=None, error=why),
    )


def _recently_launched(adir: Path) -> bool:
    try:
        return time.time() - (adir / "launch.json").stat().st_mtime < START_DEADLINE_S
    except FileNotFoundError:
        return False
