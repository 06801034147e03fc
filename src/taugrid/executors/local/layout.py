"""Where a run's files are on this machine (``$TAU_HOME/runs/<run_id>/``).

``workdir/`` (the unpacked snapshot, shared by attempts), ``outputs/``
(TAU_OUTPUT_DIR), ``checkpoints/``, ``home/`` (a sandboxed workload's HOME) and
``attempts/<k>/`` holding ``launch.json``, ``status.json``, ``supervisor.pid``,
``metrics.jsonl`` and ``output.log``. The local executor, artifact store and log source
share it; nothing outside ``executors.local`` knows these paths.
"""

from __future__ import annotations

from pathlib import Path


class RunLayout:
    def __init__(self, runs_root: Path) -> None:
        self.runs_root = runs_root

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

    def home_dir(self, run_id: str) -> Path:
        """A sandboxed run's HOME (the server user's own is hidden from it)."""
        return self.run_dir(run_id) / "home"
