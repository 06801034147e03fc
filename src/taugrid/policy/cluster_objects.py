"""Every object a policy puts on a cluster, in the order they are applied.

The set is ``render_kueue``'s (ResourceFlavors, Cohorts, ClusterQueues,
WorkloadPriorityClasses, a Namespace per workspace with its LocalQueues, every one
labelled ``taugrid.io/managed-by: taugrid``), plus, when the server's workspace access
is configured, a RoleBinding per workspace Namespace (``policy/workspace_access.py``);
only the order differs. Cluster-scoped
objects go first and LocalQueues last, because later kinds name earlier ones: a
LocalQueue lives in a Namespace (the API server refuses it before the Namespace exists)
and points at a ClusterQueue, a ClusterQueue names its Cohort and ResourceFlavors (Kueue
keeps it inactive until they exist). A RoleBinding lives in its Namespace too and comes
before the LocalQueues. In this order no object waits on a later one.

Pure: plain dicts, no client library (the adapter in ``executors.kubernetes`` applies
them; ``policy/drift.py`` compares them with what a cluster has).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taugrid.policy.kueue import API_VERSION, MANAGED_BY, render_kueue
from taugrid.policy.models import Policy
from taugrid.policy.workspace_access import RBAC_API, WorkspaceAccess, role_bindings

JsonObject = dict[str, Any]

# (apiVersion, kind) in apply order: cluster-scoped first, then the namespaced LocalQueues.
POLICY_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "Namespace"),
    (API_VERSION, "ResourceFlavor"),
    (API_VERSION, "Cohort"),
    (API_VERSION, "ClusterQueue"),
    (API_VERSION, "WorkloadPriorityClass"),
    (API_VERSION, "LocalQueue"),
)
# Only with a WorkspaceAccess: after the Namespaces, before the LocalQueues.
ACCESS_KIND = (RBAC_API, "RoleBinding")
_WITH_ACCESS = (*POLICY_KINDS[:-1], ACCESS_KIND, POLICY_KINDS[-1])
_RANK = {kind: i for i, (_, kind) in enumerate(_WITH_ACCESS)}


def policy_kinds(access: WorkspaceAccess | None = None) -> tuple[tuple[str, str], ...]:
    """The kinds a policy puts on a cluster, in apply order (RoleBindings only with
    ``access``): what drift lists."""
    return POLICY_KINDS if access is None else _WITH_ACCESS


@dataclass(frozen=True, order=True)
class ObjectName:
    """Which object, in words: ``ClusterQueue team-a``, ``LocalQueue team-a/main``."""

    kind: str
    name: str
    namespace: str | None = None

    @classmethod
    def of(cls, obj: JsonObject) -> ObjectName:
        meta = obj.get("metadata") or {}
        return cls(str(obj.get("kind", "")), str(meta.get("name", "")), meta.get("namespace"))

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


def apply_rank(kind: str) -> int:
    """Where objects of ``kind`` come in the apply order (unknown kinds last)."""
    return _RANK.get(kind, len(_RANK))


def desired_objects(
    policy: Policy, namespace_prefix: str = "", access: WorkspaceAccess | None = None
) -> list[JsonObject]:
    """The objects ``policy`` wants on a cluster, in apply order (policy order within a
    kind), with each workspace's RoleBinding when ``access`` is given. Raises
    UsageError, before anything could be applied, when a workspace's namespace
    (``namespace_prefix + workspace``) is not a valid name."""
    objects = render_kueue(policy, namespace_prefix)
    if access is not None:
        objects += role_bindings(policy, namespace_prefix, access)
    return sorted(objects, key=lambda o: apply_rank(o["kind"]))  # stable: policy order kept


def is_managed(obj: JsonObject) -> bool:
    """Whether TauGrid manages ``obj`` (its managed-by label)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in MANAGED_BY.items())
