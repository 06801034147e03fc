"""The environment every workload process gets (DESIGN.md 3.3). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Submitter variables that make "runs like in my shell" true (PATH, virtualenv, conda,
# locale) without copying arbitrary variables, which may hold credentials, into records.
SUBMITTER_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "TZ",
        "TMPDIR",
        "TERM",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "LD_LIBRARY_PATH",
        "CUDA_HOME",
        "HF_HOME",
    }
)
SUBMITTER_ENV_PREFIXES = ("LC_", "CONDA_")


def submitter_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in environ.items()
        if k in SUBMITTER_ENV_NAMES or k.startswith(SUBMITTER_ENV_PREFIXES)
    }


@dataclass(frozen=True)
class WorkloadContext:
    run_id: str
    run_name: str
    workspace: str
    attempt: int
    checkpoint_dir: str
    output_dir: str
    metrics_file: str
    gpu_indices: Sequence[int]
    resume_from: str | None = None


def workload_env(
    base: Mapping[str, str], spec_env: Mapping[str, str], ctx: WorkloadContext
) -> dict[str, str]:
    """Submitter env, then the spec's env, then TAU_* (which the spec may not override)."""
    env = dict(base)
    env.update(spec_env)
    env.update(
        {
            "TAU_RUN_ID": ctx.run_id,
            "TAU_RUN_NAME": ctx.run_name,
            "TAU_WORKSPACE": ctx.workspace,
            "TAU_ATTEMPT": str(ctx.attempt),
            "TAU_CHECKPOINT_DIR": ctx.checkpoint_dir,
            "TAU_OUTPUT_DIR": ctx.output_dir,
            "TAU_METRICS_FILE": ctx.metrics_file,
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in ctx.gpu_indices),
            "PYTHONUNBUFFERED": env.get("PYTHONUNBUFFERED", "1"),
        }
    )
    if ctx.resume_from is not None:  # "" says "start fresh": nothing here can be trusted
        env["TAU_RESUME_FROM"] = ctx.resume_from
    else:
        env.pop("TAU_RESUME_FROM", None)
    return env
