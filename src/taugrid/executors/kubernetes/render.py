"""What a run's attempt becomes on a cluster: pure functions from plain data to objects.

The first shape (issue 12, first step): ``nodes: 1`` with ``launcher: command`` is one
``batch/v1`` Job in the workspace's namespace, for Kueue to admit
(``shared/reference/kueue-kuberay-contract.md``):

- labels of DESIGN.md 3.6 on the Job and its pods, and Kueue's ``queue-name`` (the
  workspace's LocalQueue) and ``priority-class`` (a WorkloadPriorityClass);
- created suspended, so nothing runs unadmitted if Kueue's webhook is down; TauGrid never
  toggles ``suspend`` (Kueue unsuspends on admission and re-suspends on eviction, and
  injects the flavor's node labels and tolerations itself);
- one pod, never retried by the Job (``backoffLimit: 0``): a failed attempt restarts as a
  new attempt object under the run's ``restart`` policy; a disruption (eviction,
  preemption, a drained node) is not counted against it (``podFailurePolicy`` ignores
  ``DisruptionTarget``);
- ``terminationGracePeriodSeconds`` from ``stop_grace``, ``activeDeadlineSeconds`` from
  ``timeout``; requests and limits as strings, ``nvidia.com/gpu`` from ``resources.gpus``;
- the workload environment as given (DESIGN.md 3.3), secrets as ``secretKeyRef`` (never a
  value);
- a restricted, non-root security context for the pod and the container.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from taugrid.errors import UsageError
from taugrid.policy.quantities import format_cpu, format_memory

MANAGED_BY = {"taugrid.io/managed-by": "taugrid"}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER = "workload"
NAME_MAX = 63  # the Job's name is also its pods' job-name label value
# The image's user when it names none: the restricted pod security standard needs a
# non-root uid, and a number (not a name) for the kubelet to check it.
DEFAULT_UID = 1000


@dataclass(frozen=True)
class SecretRef:
    """Where the workload's value of one environment variable is: a key of a Secret in
    the run's namespace."""

    secret: str
    key: str


@dataclass(frozen=True)
class JobInput:
    run_id: str
    attempt: int
    workspace: str
    namespace: str
    queue: str  # the workspace's LocalQueue
    image: str
    command: list[str] | str  # argv, or a shell command line
    env: Mapping[str, str] = field(default_factory=dict)  # the workload environment
    secrets: Mapping[str, SecretRef] = field(default_factory=dict)
    priority_class: str | None = None
    gpus: int = 0
    cpu_millis: int | None = None
    memory_bytes: int | None = None
    stop_grace_s: float = 60.0
    timeout_s: float | None = None
    workdir: str = "/workspace"


def job_name(run_id: str, attempt: int) -> str:
    """One object per attempt (a restart is a new Job, never a toggled one)."""
    name = f"{run_id}-a{attempt}"
    if len(name) > NAME_MAX:
        raise UsageError(
            f"run id {run_id!r} is too long for a Kubernetes Job name "
            f"({len(name)} > {NAME_MAX} characters with the attempt suffix)"
        )
    return name


def labels(inp: JobInput) -> dict[str, str]:
    return {
        "taugrid.io/run-id": inp.run_id,
        "taugrid.io/workspace": inp.workspace,
        "taugrid.io/attempt": str(inp.attempt),
        **MANAGED_BY,
    }


def render_job(inp: JobInput) -> dict[str, Any]:
    """The Job of one attempt of a ``nodes: 1``, ``launcher: command`` run."""
    if not inp.image:
        raise UsageError("a cluster run needs an image (image: in tau.yaml)")
    own = labels(inp)
    job_labels = {**own, QUEUE_LABEL: inp.queue}
    if inp.priority_class:
        job_labels[PRIORITY_LABEL] = inp.priority_class
    spec: dict[str, Any] = {
        "suspend": True,
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
            ]
        },
        "template": {
            "metadata": {"labels": own},
            "spec": _pod_spec(inp),
        },
    }
    if inp.timeout_s is not None:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(inp.timeout_s))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(inp.run_id, inp.attempt),
            "namespace": inp.namespace,
            "labels": job_labels,
        },
        "spec": spec,
    }


def _pod_spec(inp: JobInput) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": inp.image,
        "workingDir": inp.workdir,
        "env": _env(inp),
        "resources": _resources(inp),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        },
    }
    if isinstance(inp.command, str):
        container["command"] = ["/bin/sh", "-c", inp.command]
    else:
        container["command"] = list(inp.command)
    return {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": max(0, math.ceil(inp.stop_grace_s)),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": DEFAULT_UID,
            "runAsGroup": DEFAULT_UID,
            "fsGroup": DEFAULT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
    }


def _env(inp: JobInput) -> list[dict[str, Any]]:
    clash = sorted(set(inp.env) & set(inp.secrets))
    if clash:
        raise UsageError(f"environment variables set both as values and as secrets: {clash}")
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(inp.env.items())]
    for name, ref in sorted(inp.secrets.items()):
        out.append(
            {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
        )
    return out


def _resources(inp: JobInput) -> dict[str, Any]:
    """Quantities always as strings. CPU is requested, not limited (a CPU limit throttles a
    data loader for nothing); memory's request is its limit (an overcommitted node kills
    the biggest pod first); GPUs are extended resources: request equals limit."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if inp.cpu_millis:
        requests["cpu"] = format_cpu(inp.cpu_millis)
    if inp.memory_bytes:
        requests["memory"] = limits["memory"] = format_memory(inp.memory_bytes)
    if inp.gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(inp.gpus)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out
