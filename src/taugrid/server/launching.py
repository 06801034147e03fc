"""Build what the executor starts for one attempt: command, environment, resume point.

Only building: where the attempt resumes from is found here (``find_resume``: it hashes
the checkpoint, seconds per GiB, so it runs on the attempt starter's thread, never the
engine's), and recording it is the caller's (``AttemptStarter``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from taugrid.domain.restarts import RestartPolicy
from taugrid.domain.workload_env import WorkloadContext, workload_env
from taugrid.ports.artifacts import ArtifactStore, CheckpointInfo, WorkloadPaths
from taugrid.ports.executor import LaunchRequest, Placement
from taugrid.spec import expand_at_launch, parse_duration


def restart_policy_of(spec: Mapping[str, Any]) -> RestartPolicy:
    restart = spec.get("restart") or {}
    return RestartPolicy(
        max=int(restart.get("max", 0)),
        on=frozenset(restart.get("on") or ("error", "preemption", "hardware")),
        backoff_s=parse_duration(str(restart.get("backoff") or "0s")),
    )


@dataclass(frozen=True)
class Resume:
    """Where an attempt resumes: the newest checkpoint that verifies (sha256 of every
    file), written before the fault that stopped the attempt before it, if any."""

    best: CheckpointInfo | None
    skipped: list[CheckpointInfo] = field(default_factory=list)  # newer, each with a problem

    @property
    def resume_from(self) -> str | None:
        """TAU_RESUME_FROM: None on a first start; an empty value when every checkpoint
        was skipped, so the SDK does not scan the directory and pick one of them up."""
        if self.best is None:
            return "" if self.skipped else None
        return str(self.best.path)


def find_resume(artifacts: ArtifactStore, run_id: str, fault_at: float | None) -> Resume:
    best, skipped = artifacts.resume_point(run_id, fault_at=fault_at)
    return Resume(best, list(skipped))


def launch_request(
    run: Mapping[str, Any],
    attempt: int,
    placement: Placement,
    paths: WorkloadPaths,
    resume_from: str | None,
    secret_refs: dict[str, str],
    disk_limit_bytes: int | None,
    resume_before: float | None = None,
) -> LaunchRequest:
    """The launch of ``attempt`` of ``run`` (a full row: its resolved spec). Pure."""
    spec: Mapping[str, Any] = run["spec_resolved"]
    ctx = WorkloadContext(
        run_id=run["id"],
        run_name=run["name"],
        workspace=run["workspace"],
        attempt=attempt,
        checkpoint_dir=paths.checkpoint_dir,
        output_dir=paths.output_dir,
        metrics_file=paths.metrics_file,
        gpu_indices=list(placement.gpus),
        resume_from=resume_from,
    )
    # `${VAR}` left in env values refers to the submitter's environment or TAU_*.
    base = workload_env(run["env_summary"], {}, ctx)
    spec_env: dict[str, str] = spec.get("env") or {}
    expanded = expand_at_launch(list(spec_env.values()), base)
    env = workload_env(run["env_summary"], dict(zip(spec_env, expanded, strict=True)), ctx)
    env["TAU_CHECKPOINT_KEEP"] = str((spec.get("checkpoint") or {}).get("keep", 3))
    if resume_before is not None and resume_from is None:
        # The server saw no checkpoint to choose from (a cluster volume it does not see):
        # the SDK in the pod chooses, and leaves out what was written after the fault.
        env["TAU_RESUME_BEFORE"] = f"{resume_before:.6f}"
    command = spec["command"]
    if isinstance(command, list):
        command = expand_at_launch(command, env)
    timeout = spec.get("timeout")
    return LaunchRequest(
        run_id=run["id"],
        attempt=attempt,
        snapshot_digest=run["snapshot_digest"],
        command=command,
        setup=spec.get("setup"),
        env=env,
        stop_grace_s=parse_duration(spec.get("stop_grace") or "60s"),
        timeout_s=parse_duration(timeout) if timeout else None,
        outputs=list(spec.get("outputs") or []),
        # How the workload gets each secret, never its value: no launch request, record
        # or log ever holds one (SecretStore.workload_refs).
        secret_refs=secret_refs,
        disk_limit_bytes=disk_limit_bytes,
        image=spec.get("image"),
        nodes=int(spec.get("nodes") or 1),
        resources=dict(spec.get("resources") or {}),
        launcher=spec.get("launcher") or "command",
        placement=placement,
        workspace=run["workspace"],
        spec=dict(spec),
    )
