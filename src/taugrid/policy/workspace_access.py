"""The server's write access in workspace namespaces, as the policy's RoleBindings.

With the Helm chart's workspace-scoped RBAC the server holds its namespaced write verbs
(Jobs, RayJobs, Services, Secrets, pod evictions) only in workspace namespaces: a
ClusterRole (``TAU_WORKSPACE_CLUSTERROLE``) bound in each workspace Namespace by a
RoleBinding to the server's own ServiceAccount. The namespaces come and go with the
policy, so the RoleBindings are policy objects too: rendered here beside the
Namespaces, applied after them and before the LocalQueues, labelled
``taugrid.io/managed-by: taugrid`` and covered by drift like the rest. Without that
configuration there are none, and nothing else changes.

Pure: plain dicts (``cluster_objects.desired_objects`` adds them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from taugrid.errors import UsageError
from taugrid.policy.kueue import MANAGED_BY, WORKSPACE_LABEL, namespace_for
from taugrid.policy.models import Policy

RBAC_API = "rbac.authorization.k8s.io/v1"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


@dataclass(frozen=True)
class WorkspaceAccess:
    """Which ClusterRole each workspace namespace binds, and to which ServiceAccount."""

    cluster_role: str
    service_account: str
    namespace: str  # the ServiceAccount's

    @classmethod
    def of(cls, cluster_role: str, service_account: str) -> WorkspaceAccess:
        """From the settings: ``service_account`` as ``namespace/name``; UsageError when
        either is not a valid Kubernetes name."""
        namespace, sep, name = service_account.partition("/")
        if not sep or not _DNS_LABEL.fullmatch(namespace) or not _DNS_SUBDOMAIN.fullmatch(name):
            raise UsageError(
                f"the server's ServiceAccount {service_account!r} (TAU_SERVICE_ACCOUNT) is not "
                "namespace/name"
            )
        if len(cluster_role) > 253 or not _DNS_SUBDOMAIN.fullmatch(cluster_role):
            raise UsageError(
                f"the workspace ClusterRole {cluster_role!r} (TAU_WORKSPACE_CLUSTERROLE) is "
                "not a valid name"
            )
        return cls(cluster_role, name, namespace)


def role_bindings(
    policy: Policy, namespace_prefix: str, access: WorkspaceAccess
) -> list[dict[str, Any]]:
    """One RoleBinding per workspace, in its namespace, named after the ClusterRole
    (a roleRef cannot change: another role is another binding, the old one left over)."""
    return [
        {
            "apiVersion": RBAC_API,
            "kind": "RoleBinding",
            "metadata": {
                "name": access.cluster_role,
                "namespace": namespace_for(ws.name, namespace_prefix),
                "labels": {WORKSPACE_LABEL: ws.name, **MANAGED_BY},
            },
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": access.cluster_role,
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": access.service_account,
                    "namespace": access.namespace,
                }
            ],
        }
        for ws in policy.workspaces
    ]
