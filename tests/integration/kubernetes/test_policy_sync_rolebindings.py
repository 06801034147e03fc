"""The policy target with the workspace access configured, against the emulator: each
workspace Namespace's RoleBinding is server-side-applied after the Namespaces and before
the LocalQueues, and drift lists RoleBindings (missing, then none) only when configured."""

from __future__ import annotations

import pytest

from kube_emulator import KubeEmulator
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient
from taugrid.executors.kubernetes.policy_sync import KubePolicyTarget
from taugrid.manifests.plan import ClusterTarget
from taugrid.policy import load_policy_text
from taugrid.policy.workspace_access import WorkspaceAccess

pytestmark = pytest.mark.timeout(30)

POLICY = load_policy_text(
    """\
flavors:
  - name: cpu
cluster_queues:
  - name: shared
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 64, memory: 64Gi}
workspaces:
  - name: team-a
    local_queues: [{name: main, cluster_queue: shared}]
"""
).policy
ACCESS = WorkspaceAccess.of("taugrid-workspace", "taugrid-system/taugrid")


def target(kube: LightkubeClient, access: WorkspaceAccess | None) -> KubePolicyTarget:
    return KubePolicyTarget(kube, ClusterTarget(namespace_prefix="tau-"), access)


def test_the_role_bindings_are_applied_between_namespaces_and_local_queues(
    kube: LightkubeClient, kube_emulator: KubeEmulator
) -> None:
    with_access = target(kube, ACCESS)
    assert [str(d.object) for d in with_access.drift(POLICY) if d.object.kind == "RoleBinding"] == [
        "RoleBinding tau-team-a/taugrid-workspace"
    ]
    report = with_access.apply(POLICY)
    assert report.ok
    assert report.counts()["RoleBinding"] == 1
    paths = [r.path for r in kube_emulator.requests("apply")]
    binding = (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/tau-team-a/rolebindings/taugrid-workspace"
    )
    local_queue = "/apis/kueue.x-k8s.io/v1beta2/namespaces/tau-team-a/localqueues/main"
    assert paths.index("/api/v1/namespaces/tau-team-a") < paths.index(binding)
    assert paths.index(binding) < paths.index(local_queue)
    stored = kube_emulator.get(
        "rbac.authorization.k8s.io/v1", "RoleBinding", "tau-team-a", "taugrid-workspace"
    )
    assert stored is not None and stored["roleRef"]["name"] == "taugrid-workspace"
    assert with_access.drift(POLICY) == []
    # Without the access, RoleBindings are not TauGrid's business: not even listed.
    kube_emulator.forget_requests()
    assert target(kube, None).drift(POLICY) == []
    assert not any("rolebindings" in r.path for r in kube_emulator.requests("list"))
