"""KubePolicyTarget over real HTTP against kmock (LightkubeClient): a policy's objects are
server-side applied in order and land in the cluster, applying again changes nothing, a
field changed in the cluster and a workspace gone from the policy show as drift, and a
refused object stops the apply there with a report of what was and was not applied."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from k8s_validate import SCHEMAS, validate_object
from kube_emulator import KubeEmulator
from taugrid.executors.kubernetes.client import FIELD_MANAGER
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient
from taugrid.executors.kubernetes.policy_sync import KubePolicyTarget
from taugrid.manifests.plan import ClusterTarget
from taugrid.policy import Policy, load_policy_text
from taugrid.policy.cluster_objects import ObjectName
from taugrid.policy.drift import LEFT_OVER

pytestmark = pytest.mark.timeout(30)

POLICY_YAML = """\
flavors:
  - name: h100
    gpu_type: h100
    node_labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  - name: a100
    gpu_type: a100
cohorts:
  - name: research
cluster_queues:
  - name: team-a
    cohort: research
    queueing_strategy: StrictFIFO
    resources:
      - flavor: h100
        quotas: {gpu: {nominal: 8, borrowing_limit: 4}, cpu: 96, memory: 1Ti}
      - flavor: a100
        quotas: {gpu: 0, cpu: 0, memory: 0}
  - name: team-b
    cohort: research
    resources:
      - flavor: a100
        quotas: {gpu: 16, cpu: "1500m", memory: 64Gi}
workspaces:
  - name: team-a
    local_queues:
      - {name: urgent, cluster_queue: team-a}
      - {name: main, cluster_queue: team-a}
  - name: team-b
    local_queues:
      - {name: main, cluster_queue: team-b}
      - {name: serving, cluster_queue: team-b}
      - {name: batch, cluster_queue: team-b}
priority_classes:
  - {name: low, value: 100}
  - {name: high, value: 10000, default: true, description: "Pages someone when it waits."}
"""
POLICY = load_policy_text(POLICY_YAML).policy
KUEUE_SCHEMAS = SCHEMAS / "kueue"


@pytest.fixture
def target(kube: LightkubeClient) -> KubePolicyTarget:
    return KubePolicyTarget(kube, ClusterTarget(namespace_prefix="tau-"))


def stored(emulator: KubeEmulator, obj: dict[str, Any]) -> dict[str, Any] | None:
    meta = obj["metadata"]
    return emulator.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])


def without(policy: Policy, workspace: str) -> Policy:
    return policy.model_copy(
        update={"workspaces": [w for w in policy.workspaces if w.name != workspace]}
    )


def test_apply_creates_every_object_in_order(
    target: KubePolicyTarget, kube_emulator: KubeEmulator
) -> None:
    desired = target.desired(POLICY)
    problems = {str(ObjectName.of(o)): validate_object(o, (KUEUE_SCHEMAS,)) for o in desired}
    assert {k: v for k, v in problems.items() if v} == {}  # what we send passes strict checks

    report = target.apply(POLICY)

    assert report.ok and report.failed is None and report.not_applied == ()
    assert report.applied == tuple(ObjectName.of(o) for o in desired)
    assert report.counts() == {
        "Namespace": 2,
        "ResourceFlavor": 2,
        "Cohort": 1,
        "ClusterQueue": 2,
        "WorkloadPriorityClass": 2,
        "LocalQueue": 5,
    }
    for obj in desired:
        assert stored(kube_emulator, obj) == obj
    applies = kube_emulator.requests("apply")
    assert [r.path for r in applies][:3] == [
        "/api/v1/namespaces/tau-team-a",
        "/api/v1/namespaces/tau-team-b",
        "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/h100",
    ]
    assert (
        applies[-1].path == "/apis/kueue.x-k8s.io/v1beta2/namespaces/tau-team-b/localqueues/batch"
    )
    assert all(r.params == {"fieldManager": FIELD_MANAGER, "force": "true"} for r in applies)
    assert target.drift(POLICY) == []


def test_apply_twice_is_idempotent(target: KubePolicyTarget, kube_emulator: KubeEmulator) -> None:
    first = target.apply(POLICY)
    after_first = {str(ObjectName.of(o)): stored(kube_emulator, o) for o in target.desired(POLICY)}
    second = target.apply(POLICY)
    assert second == first
    after_second = {str(ObjectName.of(o)): stored(kube_emulator, o) for o in target.desired(POLICY)}
    assert after_second == after_first
    assert target.drift(POLICY) == []


def test_drift_before_the_first_apply_is_everything_missing(target: KubePolicyTarget) -> None:
    found = target.drift(POLICY)
    assert [d.object for d in found] == [ObjectName.of(o) for o in target.desired(POLICY)]
    assert {d.state for d in found} == {"missing"}


def test_a_field_changed_in_the_cluster_is_drift_until_applied_again(
    target: KubePolicyTarget, kube_emulator: KubeEmulator
) -> None:
    target.apply(POLICY)
    cq = kube_emulator.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", None, "team-a")
    assert cq is not None
    groups = copy.deepcopy(cq["spec"]["resourceGroups"])
    groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = 64  # someone's kubectl edit
    kube_emulator.patch(
        "kueue.x-k8s.io/v1beta2",
        "ClusterQueue",
        None,
        "team-a",
        {"spec": {"resourceGroups": groups, "queueingStrategy": "BestEffortFIFO"}},
    )
    kube_emulator.patch(
        "v1", "Namespace", None, "tau-team-b", {"metadata": {"annotations": {"x": "y"}}}
    )

    [found] = target.drift(POLICY)

    assert str(found) == (
        'ClusterQueue team-a: spec.queueingStrategy: is "BestEffortFIFO" in the cluster, the '
        'policy says "StrictFIFO"; spec.resourceGroups[0].flavors[h100].resources'
        '[nvidia.com/gpu].nominalQuota: is 64 in the cluster, the policy says "8"'
    )
    assert found.state == "changed"  # the namespace's new annotation is not ours: no drift
    target.apply(POLICY)
    assert target.drift(POLICY) == []


def test_a_removed_workspace_is_left_over_and_not_deleted(
    target: KubePolicyTarget, kube_emulator: KubeEmulator
) -> None:
    target.apply(POLICY)
    # Objects without TauGrid's label are not its business (kmock ignores the selector).
    kube_emulator.put(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}
    )
    smaller = without(POLICY, "team-b")

    found = target.drift(smaller)

    assert [(str(d.object), d.what) for d in found] == [
        ("Namespace tau-team-b", LEFT_OVER),
        ("LocalQueue tau-team-b/batch", LEFT_OVER),
        ("LocalQueue tau-team-b/main", LEFT_OVER),
        ("LocalQueue tau-team-b/serving", LEFT_OVER),
    ]
    report = target.apply(smaller)
    assert report.ok and report.counts()["Namespace"] == 1 and report.counts()["LocalQueue"] == 2
    assert kube_emulator.get("v1", "Namespace", None, "tau-team-b") is not None  # never deleted
    assert [str(d.object) for d in target.drift(smaller)] == [str(d.object) for d in found]


@pytest.mark.parametrize(
    ("pattern", "status", "failed", "applied"),
    [
        ("apply clusterqueues", 422, "ClusterQueue team-a", 5),
        ("apply localqueues", 403, "LocalQueue tau-team-a/urgent", 9),
    ],
)
def test_a_refused_object_stops_the_apply_there(
    target: KubePolicyTarget,
    kube_emulator: KubeEmulator,
    pattern: str,
    status: int,
    failed: str,
    applied: int,
) -> None:
    kube_emulator.fail_next(pattern, status, message="admission webhook denied the request")
    desired = target.desired(POLICY)

    report = target.apply(POLICY)

    assert not report.ok and str(report.failed) == failed
    assert "admission webhook denied the request" in report.error
    assert f"HTTP {status}" in report.error and failed in report.error
    assert report.applied == tuple(ObjectName.of(o) for o in desired[:applied])
    assert report.not_applied == tuple(ObjectName.of(o) for o in desired[applied + 1 :])
    for obj in desired[:applied]:
        assert stored(kube_emulator, obj) == obj
    for obj in desired[applied:]:
        assert stored(kube_emulator, obj) is None  # nothing after the failure was tried
    assert len(kube_emulator.requests("apply")) == applied + 1

    again = target.apply(POLICY)  # once the cause is gone, applying again finishes the job
    assert again.ok and len(again.applied) == len(desired)
    assert target.drift(POLICY) == []
