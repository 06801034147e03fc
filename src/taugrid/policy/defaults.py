"""The built-in policy, in force until the platform team applies one."""

from __future__ import annotations

from collections.abc import Iterable

from taugrid.policy.models import (
    STANDARD_PRIORITIES,
    ClusterQueue,
    CpuQuota,
    Flavor,
    FlavorQuotas,
    GpuQuota,
    LocalQueue,
    MemoryQuota,
    Policy,
    Preemption,
    Quotas,
    Workspace,
)
from taugrid.policy.quantities import format_cpu, format_memory

DEFAULT = "default"
LOCAL_FLAVOR = "local"


def default_policy(
    gpus: int,
    gpu_type: str | None,
    cpus_millis: int,
    memory_bytes: int,
    workspaces: Iterable[str] = (),
) -> Policy:
    """One queue over everything this machine has.

    Flavor ``local`` (with ``gpu_type`` when the GPUs are all of one known type), cluster
    queue ``default`` without a cohort whose nominal quota is the machine, workspace
    ``default`` and every one of ``workspaces`` (those the server's identity store knows)
    with local queue ``default``, priority classes low=100, normal=1000 (the default)
    and high=10000, and preemption of lower priority within the queue. So a workspace
    made with ``tau admin workspace create`` can run at once until a policy is applied.
    """
    for name, value in (
        ("gpus", gpus),
        ("cpus_millis", cpus_millis),
        ("memory_bytes", memory_bytes),
    ):
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    quotas = Quotas(
        gpu=GpuQuota(nominal=gpus),
        cpu=CpuQuota(nominal=format_cpu(cpus_millis)),
        memory=MemoryQuota(nominal=format_memory(memory_bytes)),
    )
    return Policy(
        flavors=[Flavor(name=LOCAL_FLAVOR, gpu_type=gpu_type)],
        cohorts=[],
        cluster_queues=[
            ClusterQueue(
                name=DEFAULT,
                preemption=Preemption(within_cluster_queue="LowerPriority"),
                resources=[FlavorQuotas(flavor=LOCAL_FLAVOR, quotas=quotas)],
            )
        ],
        workspaces=[
            Workspace(
                name=name,
                local_queues=[LocalQueue(name=DEFAULT, cluster_queue=DEFAULT)],
                default_queue=DEFAULT,
            )
            for name in [DEFAULT, *sorted(set(workspaces) - {DEFAULT})]
        ],
        priority_classes=list(STANDARD_PRIORITIES),
    )
