"""The ``policy.yaml`` models (DESIGN 3.5), in TauGrid's words and 1:1 with Kueue v1beta2.

A flavor is a ResourceFlavor, a cohort a Cohort, a cluster queue a ClusterQueue (with one
resource group), a workspace a Namespace with LocalQueues, a priority class a
WorkloadPriorityClass. Per-user limits are TauGrid's own (Kueue's granularity is the
namespace). Like tau.yaml the models forbid unknown keys and do not coerce; amounts
keep the text the platform team wrote, and :mod:`taugrid.policy.quantities` turns them
into numbers. Checks that span several entries (references, duplicates, limits against
a cohort) live in :mod:`taugrid.policy.checks`, which sees the raw data, so a policy
with both a bad value and a dangling reference reports both.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from taugrid.domain.quota import QueueingStrategy, ReclaimWithinCohort, Resource, WithinClusterQueue
from taugrid.objfs import endpoint_problem, url_problem
from taugrid.policy.quantities import CPU_HELP, MEMORY_HELP, cpu_millis, gpu_count, memory_bytes
from taugrid.spec.messages import yaml_kind
from taugrid.spec.models import NonBlank

NAME_MAX = 63
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
MAX_NODE_LABELS = 8  # Kueue's ResourceFlavor limits
MAX_TAINTS = 8
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


def check_name(value: str) -> str:
    """A DNS-1123 label: it becomes a Kubernetes object name and a label value."""
    if len(value) > NAME_MAX or not re.fullmatch(_DNS_LABEL, value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 name: lowercase letters, digits and '-', "
            f"starting and ending with a letter or digit, at most {NAME_MAX} characters"
        )
    return value


def _check_label_key(value: str) -> str:
    prefix, _, name = value.rpartition("/")
    if (
        len(name) > 63
        or not re.fullmatch(_LABEL_NAME, name)
        or (prefix and (len(prefix) > 253 or not re.fullmatch(_SUBDOMAIN, prefix)))
        or (not prefix and "/" in value)
    ):
        raise ValueError(
            f"{value!r} is not a Kubernetes label key: an optional DNS prefix and '/', then "
            "at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"
        )
    return value


def _check_label_value(value: str) -> str:
    if len(value) > 63 or not re.fullmatch(f"({_LABEL_NAME})?", value):
        raise ValueError(
            f"{value!r} is not a Kubernetes label value: at most 63 letters, digits, '-', "
            "'_' or '.', starting and ending alphanumeric"
        )
    return value


def _check_node_labels(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_NODE_LABELS:
        raise ValueError(f"at most {MAX_NODE_LABELS} node labels (Kueue's limit), got {len(value)}")
    return value


def _check_taints(value: list[Taint]) -> list[Taint]:
    if len(value) > MAX_TAINTS:
        raise ValueError(f"at most {MAX_TAINTS} taints (Kueue's limit), got {len(value)}")
    return value


def _not_empty(value: list[Any]) -> list[Any]:
    if not value:
        raise ValueError("must list at least one entry")
    return value


def _cpu_text(value: object) -> object:
    # YAML gives 4 or 0.5 for plain numbers; keep them as text like "500m".
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        return value
    raise ValueError(f"must be {CPU_HELP}, got {yaml_kind(value)}")


def _memory_text(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return value
    raise ValueError(f"must be {MEMORY_HELP}, got {yaml_kind(value)}")


def _check_cpu(value: str) -> str:
    cpu_millis(value)
    return value


def _check_memory(value: str) -> str:
    memory_bytes(value)
    return value


def _nominal_shorthand(value: object) -> object:
    """``gpu: 8`` is short for ``gpu: {nominal: 8}``."""
    if value is None or isinstance(value, (dict, BaseModel)):
        return value
    return {"nominal": value}


Name = Annotated[str, AfterValidator(check_name)]
LabelKey = Annotated[str, AfterValidator(_check_label_key)]
LabelValue = Annotated[str, AfterValidator(_check_label_value)]
GpuAmount = Annotated[int, AfterValidator(gpu_count)]
CpuAmount = Annotated[str, BeforeValidator(_cpu_text), AfterValidator(_check_cpu)]
MemoryAmount = Annotated[str, BeforeValidator(_memory_text), AfterValidator(_check_memory)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Taint(_Strict):
    """A taint the flavor's nodes carry (ResourceFlavor ``nodeTaints``)."""

    key: LabelKey
    value: LabelValue | None = None
    effect: TaintEffect


class Flavor(_Strict):
    """A kind of node or GPU (ResourceFlavor)."""

    name: Name
    gpu_type: NonBlank | None = Field(
        None, description="Matches a run's resources.gpu_type, e.g. h100."
    )
    node_labels: Annotated[dict[LabelKey, LabelValue], AfterValidator(_check_node_labels)] = Field(
        default_factory=dict, description="Labels selecting this flavor's nodes."
    )
    taints: Annotated[list[Taint], AfterValidator(_check_taints)] = Field(default_factory=list)
    gpus_per_node: int | None = Field(
        None,
        ge=1,
        description=(
            "GPUs on each node of this flavor; a cluster run asking for more per node "
            "than any of its flavors has is refused at submit."
        ),
    )
    tolerate_taints: bool = Field(
        True,
        description=(
            "Let Kueue add tolerations for the taints to the pods it admits on this flavor; "
            "with false, workloads must tolerate them themselves."
        ),
    )


class Cohort(_Strict):
    """Cluster queues that lend each other unused quota."""

    name: Name


class GpuQuota(_Strict):
    nominal: GpuAmount
    borrowing_limit: GpuAmount | None = None
    lending_limit: GpuAmount | None = None


class CpuQuota(_Strict):
    nominal: CpuAmount
    borrowing_limit: CpuAmount | None = None
    lending_limit: CpuAmount | None = None


class MemoryQuota(_Strict):
    nominal: MemoryAmount
    borrowing_limit: MemoryAmount | None = None
    lending_limit: MemoryAmount | None = None


AnyQuota = GpuQuota | CpuQuota | MemoryQuota


class Quotas(_Strict):
    """Quota per resource; a bare amount is the nominal quota."""

    gpu: Annotated[GpuQuota | None, BeforeValidator(_nominal_shorthand)] = None
    cpu: Annotated[CpuQuota | None, BeforeValidator(_nominal_shorthand)] = None
    memory: Annotated[MemoryQuota | None, BeforeValidator(_nominal_shorthand)] = None

    @model_validator(mode="after")
    def _some(self) -> Quotas:
        if not self.items():
            raise ValueError("set a quota for at least one of gpu, cpu, memory")
        return self

    def items(self) -> list[tuple[Resource, AnyQuota]]:
        """The quotas set, in the order gpu, cpu, memory."""
        pairs: list[tuple[Resource, AnyQuota | None]] = [
            ("gpu", self.gpu),
            ("cpu", self.cpu),
            ("memory", self.memory),
        ]
        return [(name, quota) for name, quota in pairs if quota is not None]


class FlavorQuotas(_Strict):
    """The quota a cluster queue holds of one flavor."""

    flavor: Name
    quotas: Quotas


class Preemption(_Strict):
    """Kueue's preemption rules, with Kueue's meanings and defaults."""

    within_cluster_queue: WithinClusterQueue = "Never"
    reclaim_within_cohort: ReclaimWithinCohort = "Never"


class ClusterQueue(_Strict):
    """A pool of quota (ClusterQueue); flavors in order of preference."""

    name: Name
    cohort: Name | None = None
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    preemption: Preemption = Field(default_factory=Preemption)
    resources: Annotated[list[FlavorQuotas], AfterValidator(_not_empty)]


class LocalQueue(_Strict):
    """A queue researchers name in tau.yaml (LocalQueue in the workspace's namespace)."""

    name: Name
    cluster_queue: Name


class UserLimits(_Strict):
    """Per user in the workspace; TauGrid enforces these, Kueue cannot express them."""

    max_running_runs: int | None = Field(None, ge=0)
    max_gpus: int | None = Field(None, ge=0)


def _check_url(value: str) -> str:
    problem = url_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _check_endpoint(value: str) -> str:
    problem = endpoint_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _check_secret_name(value: str) -> str:
    """A Secret's name: a DNS-1123 subdomain."""
    if len(value) > 253 or not re.fullmatch(_SUBDOMAIN, value):
        raise ValueError(
            f"{value!r} is not a Kubernetes Secret name: lowercase letters, digits, '-' "
            "and '.', starting and ending with a letter or digit, at most 253 characters"
        )
    return value


class Storage(_Strict):
    """Where a workspace's runs keep checkpoints and outputs on a cluster: a PVC, or an
    object storage URL (one of the two)."""

    pvc: Name | None = Field(
        None,
        description=(
            "A PersistentVolumeClaim in the workspace's namespace (ReadWriteMany for "
            "multi-node runs); each run gets its own directory runs/<run id> on it."
        ),
    )
    url: Annotated[str, AfterValidator(_check_url)] | None = Field(
        None,
        description=(
            "An object storage URL, s3://bucket[/prefix]; each run's files go under "
            "<url>/runs/<run id>/ (checkpoints/, outputs/), moved by a sidecar of the pod."
        ),
    )
    endpoint_url: Annotated[str, AfterValidator(_check_endpoint)] | None = Field(
        None, description="The S3 API's endpoint (MinIO, Ceph, ...); default: AWS's."
    )
    credentials_secret: Annotated[str, AfterValidator(_check_secret_name)] | None = Field(
        None,
        description=(
            "A Secret in the workspace's namespace with keys AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY; default: the pod's own identity (e.g. IRSA)."
        ),
    )

    @model_validator(mode="after")
    def _one_place(self) -> Storage:
        if (self.pvc is None) == (self.url is None):
            raise ValueError(
                "set exactly one of pvc (a PersistentVolumeClaim) and url (object storage)"
                if self.pvc is None
                else "pvc and url are mutually exclusive: set one of them"
            )
        if self.url is None:
            extra = [
                k for k in ("endpoint_url", "credentials_secret") if getattr(self, k) is not None
            ]
            if extra:
                verb = "goes" if len(extra) == 1 else "go"
                raise ValueError(f"{' and '.join(extra)} {verb} with url, not with pvc")
        return self


class Workspace(_Strict):
    """A team's space (a Namespace on a cluster) and the queues it submits to."""

    name: Name
    local_queues: Annotated[list[LocalQueue], AfterValidator(_not_empty)]
    default_queue: Name | None = Field(None, description="Default: the first local queue.")
    user_limits: UserLimits | None = None
    storage: Storage | None = Field(
        None,
        description=(
            "Cluster runs' checkpoints and outputs; without it they live in the pod only "
            "and a restart cannot resume."
        ),
    )

    @property
    def default_local_queue(self) -> str:
        return self.default_queue or self.local_queues[0].name


class PriorityClass(_Strict):
    """A priority runs can name (WorkloadPriorityClass); higher values go first."""

    name: Name
    value: int = Field(ge=INT32_MIN, le=INT32_MAX)
    description: str = ""
    default: bool = False


STANDARD_PRIORITIES: tuple[PriorityClass, ...] = (
    PriorityClass(name="low", value=100, description="Opportunistic work; preempted first."),
    PriorityClass(name="normal", value=1000, description="The default.", default=True),
    PriorityClass(name="high", value=10000, description="Urgent work; may preempt lower."),
)


def _duration(value: str) -> str:
    from taugrid.spec import parse_duration

    if parse_duration(value) <= 0:
        raise ValueError("give a duration over zero, e.g. 30m or 2h")
    return value


class GpuIdle(_Strict):
    """When a running run's GPUs count as idle, and what is done about it (like dstack's
    utilization policy): every GPU the run holds under ``below`` percent utilization for
    ``after`` flags it (an event, the metric ``taugrid_runs_gpu_idle``); ``stop`` also
    stops it (it ends CANCELLED, its event says why)."""

    below: float = Field(5.0, ge=0, le=100, description="Utilization under this % is idle.")
    after: Annotated[str, AfterValidator(_duration)] = Field(
        "30m", description="How long the GPUs must stay idle, e.g. 30m."
    )
    action: Literal["off", "flag", "stop"] = Field("flag", description="off, flag or stop.")


class Policy(_Strict):
    """The platform policy: policy.yaml."""

    model_config = ConfigDict(title="policy.yaml")

    flavors: Annotated[list[Flavor], AfterValidator(_not_empty)]
    cohorts: list[Cohort] = Field(default_factory=list)
    cluster_queues: Annotated[list[ClusterQueue], AfterValidator(_not_empty)]
    workspaces: Annotated[list[Workspace], AfterValidator(_not_empty)]
    priority_classes: Annotated[list[PriorityClass], AfterValidator(_not_empty)] = Field(
        default_factory=lambda: list(STANDARD_PRIORITIES),
        description="Default: low=100, normal=1000 (the default), high=10000.",
    )
    gpu_idle: GpuIdle | None = Field(
        None, description="Idle GPUs of running runs (default: flag after 30 min under 5%)."
    )

    @property
    def default_priority(self) -> PriorityClass:
        return next(p for p in self.priority_classes if p.default)
