"""The policy target on a cluster: a policy's Kueue objects and workspace Namespaces (and,
with the workspace access configured, their RoleBindings) put there by server-side
apply, and what the cluster has that differs.

``apply`` sends each object with ``KubeClient.apply`` (field manager ``taugrid``, forced:
TauGrid owns the fields it sets, and a person's ``kubectl edit`` of one is drift to be
undone, not a conflict to stop at). Retries are the client's; an object that still
fails stops the apply there (a LocalQueue without its Namespace or ClusterQueue is no
use) and the report says what was applied and what not. See ``ports/policy_target.py``
for the contract.
"""

from __future__ import annotations

import logging

from taugrid.executors.kubernetes.client import KubeClient, KubeError
from taugrid.manifests.plan import ClusterTarget
from taugrid.policy.cluster_objects import (
    JsonObject,
    ObjectName,
    desired_objects,
    is_managed,
    policy_kinds,
)
from taugrid.policy.drift import Drift, drift
from taugrid.policy.kueue import MANAGED_BY
from taugrid.policy.models import Policy
from taugrid.policy.workspace_access import WorkspaceAccess
from taugrid.ports.policy_target import ApplyReport, PolicyTarget

log = logging.getLogger("taugrid.kubernetes")


class KubePolicyTarget(PolicyTarget):
    def __init__(
        self, client: KubeClient, target: ClusterTarget, access: WorkspaceAccess | None = None
    ) -> None:
        self.client = client
        self.target = target
        self.access = access  # each workspace Namespace's RoleBinding; None: none

    def desired(self, policy: Policy) -> list[JsonObject]:
        return desired_objects(policy, self.target.namespace_prefix, self.access)

    def apply(self, policy: Policy) -> ApplyReport:
        objects = self.desired(policy)  # a render failure raises here, before any request
        names = [ObjectName.of(o) for o in objects]
        for i, obj in enumerate(objects):
            try:
                self.client.apply(obj, force=True)
            except KubeError as exc:
                return ApplyReport(tuple(names[:i]), names[i], exc.message, tuple(names[i + 1 :]))
            except Exception as exc:  # a bug or a broken transport: still say what was done
                log.exception("applying %s", names[i])
                error = f"{type(exc).__name__}: {exc}"
                return ApplyReport(tuple(names[:i]), names[i], error, tuple(names[i + 1 :]))
        return ApplyReport(tuple(names))

    def drift(self, policy: Policy) -> list[Drift]:
        desired = self.desired(policy)
        live: list[JsonObject] = []
        for api_version, kind in policy_kinds(self.access):
            found = self.client.list(api_version, kind, labels=dict(MANAGED_BY)).items
            # The label selector is filtered here too: a server (or a fake) that ignores
            # it must not make other objects look like TauGrid's left-overs.
            live += [o for o in found if is_managed(o)]
        return drift(desired, live)
