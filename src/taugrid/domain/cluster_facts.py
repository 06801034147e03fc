"""What ``tau admin cluster check`` knows about a cluster and the policy in force, as
plain data: the input of the pure verdict (``domain.cluster_readiness``).

The cluster's half is gathered by an adapter (``executors.kubernetes.cluster_facts``,
behind ``ports.cluster_facts``) from API discovery, the CustomResourceDefinitions, the
admission webhooks, the add-ons' Deployments, the nodes and the health agents' pods. A
fact that could not be read is None with the reason in ``errors``, so one forbidden list
makes one line say so instead of failing the whole check. The server's half (the policy
in force, its drift, when each node's agent last reported) comes from the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class KubeVersion:
    """``GET /version``: ``major``/``minor`` as the server says them (``"30+"`` on some
    distributions) and ``git_version`` (``v1.32.3-gke.100``)."""

    major: str
    minor: str
    git_version: str


@dataclass(frozen=True)
class Crd:
    """One CustomResourceDefinition: ``name`` is ``plural.group``; ``served`` the
    versions it serves."""

    name: str
    group: str
    plural: str
    served: tuple[str, ...]


@dataclass(frozen=True)
class Webhook:
    """One Mutating- or ValidatingWebhookConfiguration and the services its webhooks
    call (``namespace/name``)."""

    kind: str  # "mutating" | "validating"
    name: str
    services: tuple[str, ...] = ()


@dataclass(frozen=True)
class Controller:
    """A Deployment that may be an add-on's controller: its containers' images and how
    many of its replicas are ready."""

    namespace: str
    name: str
    images: tuple[str, ...]
    replicas: int
    ready: int


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    gpus: int  # allocatable nvidia.com/gpu


@dataclass(frozen=True)
class AgentPod:
    """A GPU health agent's pod (label ``app.kubernetes.io/component: health-agent``)."""

    namespace: str
    name: str
    node: str  # spec.nodeName; "" while unscheduled
    phase: str
    ready: bool
    waiting: str = ""  # a container's waiting reason (CrashLoopBackOff, ImagePullBackOff)


@dataclass(frozen=True)
class ClusterFacts:
    """What the adapter read; each field None when it could not be read, with the reason
    in ``errors`` under the field's name."""

    version: KubeVersion | None = None
    api_groups: Mapping[str, tuple[str, ...]] | None = None  # group -> served versions
    crds: tuple[Crd, ...] | None = None
    webhooks: tuple[Webhook, ...] | None = None
    controllers: tuple[Controller, ...] | None = None  # Deployments naming kueue/kuberay
    nodes: tuple[Node, ...] | None = None
    agent_pods: tuple[AgentPod, ...] | None = None
    errors: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DriftItem:
    """One object of the policy's that the cluster lacks or has otherwise
    (``policy.drift.Drift`` as plain data)."""

    kind: str
    object: str  # "ClusterQueue team-a", "LocalQueue tau-a/main"
    what: str
    state: str  # "missing" | "changed" | "left_over"


@dataclass(frozen=True)
class PolicyFile:
    """The policy file the server applies at start (``TAU_POLICY_FILE``) and what came
    of it: ``outcome`` ``applied`` (recorded at start), ``unchanged`` (it was already in
    force) or ``failed`` (``error`` says why); ``in_force``: whether the policy in force
    now is still the file's (an apply by hand since replaces it until the next start)."""

    path: str
    outcome: str
    error: str = ""
    in_force: bool = True


@dataclass(frozen=True)
class PolicyFacts:
    """The policy in force as the verdict needs it."""

    source: str  # where it came from ("built-in default" for the built-in)
    builtin: bool
    flavors: Mapping[str, Mapping[str, str]]  # flavor -> its nodeLabels
    cluster_queues: int
    local_queues: int
    drift: tuple[DriftItem, ...] | None  # None when the cluster could not be compared
    drift_error: str = ""
    policy_file: PolicyFile | None = None  # None: no policy file configured


@dataclass(frozen=True)
class AgentReports:
    """When each node's health agent last reported to the server (unix seconds), and
    after how long an agent counts as silent; ``seen`` None when the server takes no
    reports (its GPU health is off)."""

    seen: Mapping[str, float] | None
    stale_s: float = 120.0
