"""A validated policy as the plain data the scheduler and the server decide over."""

from __future__ import annotations

from dataclasses import dataclass, field

from taugrid.domain import quota
from taugrid.domain.gpu_use import IdleAction, IdleRule
from taugrid.policy.models import AnyQuota, CpuQuota, GpuQuota, Policy
from taugrid.policy.quantities import cpu_millis, memory_bytes

Workspace = str
LocalQueueName = str
ClusterQueueName = str


@dataclass(frozen=True)
class DomainPolicy:
    """Quotas in integers (GPUs, CPU millicores, memory bytes), keyed by name."""

    queues: dict[ClusterQueueName, quota.ClusterQueue]
    flavors: dict[str, quota.Flavor]
    priorities: dict[str, int]  # priority class -> value
    default_priority: str
    local_queues: dict[tuple[Workspace, LocalQueueName], ClusterQueueName]
    default_queue: dict[Workspace, LocalQueueName]
    user_limits: dict[Workspace, quota.UserLimit]  # only workspaces that set limits
    idle: IdleRule = field(default_factory=IdleRule)  # gpu_idle: when GPUs count as idle


def _amount(q: AnyQuota, value: str | int | None) -> int | None:
    if value is None:
        return None
    if isinstance(q, GpuQuota):
        assert isinstance(value, int)
        return value
    assert isinstance(value, str)
    return cpu_millis(value) if isinstance(q, CpuQuota) else memory_bytes(value)


def _resource_quota(q: AnyQuota) -> quota.ResourceQuota:
    nominal = _amount(q, q.nominal)
    assert nominal is not None
    return quota.ResourceQuota(
        nominal=nominal,
        borrowing_limit=_amount(q, q.borrowing_limit),
        lending_limit=_amount(q, q.lending_limit),
    )


def to_domain(policy: Policy) -> DomainPolicy:
    """The scheduler's view of a validated policy."""
    flavors = {
        f.name: quota.Flavor(
            name=f.name,
            gpu_type=f.gpu_type,
            node_labels=dict(f.node_labels),
            taints=tuple(t.model_dump(exclude_none=True) for t in f.taints),
        )
        for f in policy.flavors
    }
    queues = {
        cq.name: quota.ClusterQueue(
            name=cq.name,
            flavors=tuple(
                quota.FlavorQuotas(
                    flavor=fq.flavor,
                    resources={r: _resource_quota(q) for r, q in fq.quotas.items()},
                )
                for fq in cq.resources
            ),
            cohort=cq.cohort,
            strategy=cq.queueing_strategy,
            within_cluster_queue=cq.preemption.within_cluster_queue,
            reclaim_within_cohort=cq.preemption.reclaim_within_cohort,
        )
        for cq in policy.cluster_queues
    }
    return DomainPolicy(
        queues=queues,
        flavors=flavors,
        priorities={p.name: p.value for p in policy.priority_classes},
        default_priority=policy.default_priority.name,
        local_queues={
            (ws.name, lq.name): lq.cluster_queue
            for ws in policy.workspaces
            for lq in ws.local_queues
        },
        default_queue={ws.name: ws.default_local_queue for ws in policy.workspaces},
        user_limits={
            ws.name: quota.UserLimit(
                max_running=ws.user_limits.max_running_runs, max_gpus=ws.user_limits.max_gpus
            )
            for ws in policy.workspaces
            if ws.user_limits is not None
        },
        idle=_idle_rule(policy),
    )


def _idle_rule(policy: Policy) -> IdleRule:
    from taugrid.spec import parse_duration

    if policy.gpu_idle is None:
        return IdleRule()
    g = policy.gpu_idle
    return IdleRule(float(g.below), parse_duration(g.after), IdleAction(g.action))
