"""Plain data the scheduler decides over: the platform policy as quotas, and workloads.

Kueue's model (v1beta2), so the local scheduler and a cluster agree on what a policy
means: ResourceFlavors, ClusterQueues with nominal quota per flavor and resource,
cohorts that lend unused quota to each other within borrowing and lending limits,
priorities, and preemption rules. Per-user limits are TauGrid's own (Kueue's
granularity is the namespace). Amounts are integers: GPUs, CPU millicores, memory bytes.
Pure: the policy package builds these from policy.yaml; the server builds workloads from
runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Resource = Literal["gpu", "cpu", "memory"]
RESOURCES: tuple[Resource, ...] = ("gpu", "cpu", "memory")
QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
WithinClusterQueue = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
ReclaimWithinCohort = Literal["Never", "LowerPriority", "Any"]


@dataclass(frozen=True)
class Flavor:
    """A kind of machine or GPU (ResourceFlavor). ``gpu_type`` matches ``resources.gpu_type``."""

    name: str
    gpu_type: str | None = None
    node_labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True)
class ResourceQuota:
    nominal: int
    borrowing_limit: int | None = None  # None: may borrow all the cohort lends
    lending_limit: int | None = None  # None: may lend all unused nominal quota


@dataclass(frozen=True)
class FlavorQuotas:
    flavor: str
    resources: Mapping[Resource, ResourceQuota]


@dataclass(frozen=True)
class ClusterQueue:
    name: str
    flavors: tuple[FlavorQuotas, ...]  # in order of preference, as Kueue tries them
    cohort: str | None = None
    strategy: QueueingStrategy = "BestEffortFIFO"
    within_cluster_queue: WithinClusterQueue = "Never"
    reclaim_within_cohort: ReclaimWithinCohort = "Never"


@dataclass(frozen=True)
class UserLimit:
    """At most this much per user in one workspace (None: no limit)."""

    max_running: int | None = None
    max_gpus: int | None = None


@dataclass(frozen=True)
class Workload:
    """One run's demand, all-or-nothing (a gang): totals over all of its nodes."""

    id: str
    cluster_queue: str
    workspace: str
    user: str
    priority: int
    created: float  # submit time; FIFO order within a priority
    requests: Mapping[Resource, int]
    gpu_type: str | None = None


@dataclass(frozen=True)
class Admitted:
    workload: Workload
    flavor: str  # the flavor all of its resources were assigned from
    admitted_at: float = 0.0
    evicting: bool = False  # being preempted: still holds quota until its process stops
    # The pending workload whose preemption is evicting it (Preemption.preemptor_id), when
    # known: the scheduler keeps that quota for that preemptor while the victim stops.
    preempted_by: str | None = None


@dataclass(frozen=True)
class Snapshot:
    queues: Mapping[str, ClusterQueue]
    flavors: Mapping[str, Flavor]
    admitted: tuple[Admitted, ...]
    pending: tuple[Workload, ...]
    user_limits: Mapping[str, UserLimit] = field(default_factory=dict)  # by workspace
