"""Build what the executor starts for one attempt: command, environment, resume point.

Split from the engine so the control loop reads as observe → decide → act; everything
here is about one attempt's launch.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from taugrid.domain.restarts import RestartPolicy
from taugrid.domain.states import Reason
from taugrid.domain.workload_env import WorkloadContext, workload_env
from taugrid.executors.base import LaunchRequest
from taugrid.executors.local.executor import LocalExecutor
from taugrid.executors.local.launch import free_port, launch_command
from taugrid.executors.local.secrets import LocalSecretStore, secret_files
from taugrid.server.run_files import RunFiles
from taugrid.spec import expand_at_launch, parse_duration
from taugrid.store.runs import Row, RunStore

log = logging.getLogger("taugrid.engine")


def restart_policy_of(spec: dict[str, Any]) -> RestartPolicy:
    restart = spec.get("restart") or {}
    return RestartPolicy(
        max=int(restart.get("max", 0)),
        on=frozenset(restart.get("on") or ("error", "preemption", "hardware")),
        backoff_s=parse_duration(str(restart.get("backoff") or "0s")),
    )


class AttemptLauncher:
    def __init__(
        self,
        store: RunStore,
        executor: LocalExecutor,
        files: RunFiles,
        snapshots_dir: Path,
        secrets: LocalSecretStore,
    ) -> None:
        self.secrets = secrets
        self.store = store
        self.executor = executor
        self.files = files
        self.snapshots_dir = snapshots_dir

    def request(self, run: Row, attempt: int) -> LaunchRequest:
        """The launch of ``attempt``; records where it resumes from on the attempt."""
        resume = self._resume_point(run, attempt)
        spec: dict[str, Any] = run["spec_resolved"]
        att = self.store.attempt(run["id"], attempt)
        gpus = att["placement"].get("gpus", []) if att else []
        ctx = WorkloadContext(
            run_id=run["id"],
            run_name=run["name"],
            workspace=run["workspace"],
            attempt=attempt,
            checkpoint_dir=str(self.executor.checkpoint_dir(run["id"])),
            output_dir=str(self.executor.output_dir(run["id"])),
            metrics_file=str(self.executor.metrics_file(run["id"], attempt)),
            gpu_indices=gpus,
            resume_from=resume,
        )
        # `${VAR}` left in env values refers to the submitter's environment or TAU_*.
        base = workload_env(run["env_summary"], {}, ctx)
        spec_env: dict[str, str] = spec.get("env") or {}
        expanded = expand_at_launch(list(spec_env.values()), base)
        env = workload_env(run["env_summary"], dict(zip(spec_env, expanded, strict=True)), ctx)
        env["TAU_CHECKPOINT_KEEP"] = str((spec.get("checkpoint") or {}).get("keep", 3))
        command = spec["command"]
        if isinstance(command, list):
            command = expand_at_launch(command, env)
        resources = spec.get("resources") or {}
        command, launcher_env = launch_command(
            command,
            launcher=spec.get("launcher") or "command",
            nodes=int(spec.get("nodes") or 1),
            gpu_indices=gpus,
            procs_per_node=resources.get("procs_per_node"),
            master_port=free_port(),
        )
        env.update(launcher_env)
        timeout = spec.get("timeout")
        return LaunchRequest(
            run_id=run["id"],
            attempt=attempt,
            snapshot=self.snapshots_dir / f"{run['snapshot_digest']}.tar.gz",
            command=command,
            setup=spec.get("setup"),
            env=env,
            stop_grace_s=parse_duration(spec.get("stop_grace") or "60s"),
            timeout_s=parse_duration(timeout) if timeout else None,
            outputs=list(spec.get("outputs") or []),
            # Paths, not values: the supervisor reads them into the workload's environment
            # only, so no launch file, log or record ever holds a secret. A secret deleted
            # since submit fails the attempt there, like a command that cannot start.
            # Each reference resolves among the submitter's personal secrets in the run's
            # workspace, then the workspace's: never another workspace's.
            secret_files=secret_files(
                self.secrets,
                run["workspace"],
                run["submitter"],
                spec.get("secrets") or {},
                must_exist=False,
            ),
        )

    def _resume_point(self, run: Row, attempt: int) -> str | None:
        """The newest checkpoint that verifies (sha256 of every file); newer ones that do
        not are skipped with an event saying why. None on a first start."""
        best, skipped = self.files.resume_point(run["id"])
        for info in skipped:
            self.store.note(
                run["id"],
                Reason.CHECKPOINT_SKIPPED,
                f"checkpoint step {info.step} skipped for attempt {attempt}: {info.problem}",
            )
        if best is None:
            # Every checkpoint was skipped: an empty value keeps the SDK from scanning the
            # directory and picking one of them up again.
            return "" if skipped else None
        self.store.update_attempt(
            run["id"], attempt, resumed_from={"step": best.step, "path": str(best.path)}
        )
        log.info("%s attempt %d resumes from step %d", run["id"], attempt, best.step)
        return str(best.path)
