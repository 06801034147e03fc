"""The verdict of ``tau admin cluster check`` (domain.cluster_readiness), pure: a ready
cluster passes every check, and each way of not being ready fails its line with the
words and the fix a platform team acts on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from taugrid.domain.cluster_facts import (
    AgentPod,
    AgentReports,
    ClusterFacts,
    Controller,
    Crd,
    DriftItem,
    KubeVersion,
    Node,
    PolicyFacts,
    PolicyFile,
    Webhook,
)
from taugrid.domain.cluster_readiness import (
    FAIL,
    OK,
    WARN,
    Check,
    check_cluster,
    image_version,
    ready,
    summary,
)

NOW = 1_000_000.0
KUEUE_CRDS = [
    "clusterqueues",
    "localqueues",
    "workloads",
    "resourceflavors",
    "cohorts",
    "workloadpriorityclasses",
]


def crd(plural: str, group: str, *served: str) -> Crd:
    return Crd(f"{plural}.{group}", group, plural, served)


NODES = (
    Node("gpu-1", {"gpu": "h100"}, 8),
    Node("gpu-2", {"gpu": "h100"}, 8),
    Node("cpu-1", {"pool": "cpu"}, 0),
)
CLUSTER = ClusterFacts(
    version=KubeVersion("1", "32", "v1.32.3"),
    api_groups={"kueue.x-k8s.io": ("v1beta2", "v1beta1"), "ray.io": ("v1", "v1alpha1")},
    crds=(
        *(crd(p, "kueue.x-k8s.io", "v1beta2", "v1beta1") for p in KUEUE_CRDS),
        crd("rayjobs", "ray.io", "v1"),
        crd("rayclusters", "ray.io", "v1"),
    ),
    webhooks=(
        Webhook(
            "mutating",
            "kueue-mutating-webhook-configuration",
            ("kueue-system/kueue-webhook-service",),
        ),
        Webhook(
            "validating",
            "kueue-validating-webhook-configuration",
            ("kueue-system/kueue-webhook-service",),
        ),
    ),
    controllers=(
        Controller(
            "kueue-system",
            "kueue-controller-manager",
            ("registry.k8s.io/kueue/kueue:v0.19.2",),
            1,
            1,
        ),
        Controller(
            "kuberay-system", "kuberay-operator", ("quay.io/kuberay/operator:v1.7.0",), 1, 1
        ),
    ),
    nodes=NODES,
    agent_pods=(
        AgentPod("taugrid-system", "agent-a", "gpu-1", "Running", True),
        AgentPod("taugrid-system", "agent-b", "gpu-2", "Running", True),
    ),
)
POLICY = PolicyFacts(
    source="/etc/taugrid/policy.yaml",
    builtin=False,
    flavors={"h100": {"gpu": "h100"}, "cpu": {}},
    cluster_queues=2,
    local_queues=3,
    drift=(),
)
SEEN = {"gpu-1": NOW - 10, "gpu-2": NOW - 30}
AGENTS = AgentReports(SEEN, 120.0)


def run(
    cluster: ClusterFacts = CLUSTER, policy: PolicyFacts = POLICY, agents: AgentReports = AGENTS
) -> list[Check]:
    return check_cluster(cluster, policy, agents, now=NOW)


def line(checks: list[Check], label: str) -> Check:
    (found,) = [c for c in checks if c.label == label]
    return found


def failed(checks: list[Check]) -> list[str]:
    return [c.label for c in checks if c.status == FAIL]


def test_a_ready_cluster_passes_every_check() -> None:
    checks = run()
    assert [c.label for c in checks] == [
        "kubernetes",
        "kueue-api",
        "kueue-crds",
        "kueue-webhooks",
        "kueue-controller",
        "kuberay-api",
        "kuberay-crds",
        "kuberay-webhooks",
        "kuberay-controller",
        "cluster-queues",
        "local-queues",
        "flavor h100",
        "flavor cpu",
        "gpu-nodes",
        "health-agents",
    ]
    assert all(c.status == OK for c in checks), [c for c in checks if c.status != OK]
    assert ready(checks)
    assert summary(checks) == "cluster ready: 15 of 15 checks ok"
    assert line(checks, "kubernetes").message == "Kubernetes v1.32.3 (1.30 or newer)"
    assert line(checks, "kueue-controller").message == (
        "Kueue v0.19.2 (kueue-system/kueue-controller-manager, 1/1 ready)"
    )
    assert line(checks, "flavor h100").message == "2 node(s) with gpu=h100 (16 GPU(s))"
    assert line(checks, "flavor cpu").message == "no nodeLabels: any node"
    assert line(checks, "kuberay-webhooks").message == "none (KubeRay's webhook is optional)"
    assert line(checks, "health-agents").message == (
        "an agent reports from each of the 2 GPU node(s)"
    )
    assert line(checks, "cluster-queues").message == (
        "2 cluster queue(s) in place as the policy in force says"
    )
    assert all(c.fix == "" for c in checks)


def test_an_old_kubernetes_fails_with_the_upgrade() -> None:
    checks = run(replace(CLUSTER, version=KubeVersion("1", "29+", "v1.29.8-gke.1")))
    c = line(checks, "kubernetes")
    assert (c.status, c.message) == (FAIL, "Kubernetes v1.29.8-gke.1 is older than 1.30")
    assert c.fix == "upgrade the cluster to Kubernetes 1.30 or newer"
    assert not ready(checks)
    assert summary(checks) == "cluster not ready: 1 of 15 checks failed (kubernetes)"


def test_an_unreadable_version_says_why() -> None:
    facts = replace(CLUSTER, version=None, errors={"version": "get: forbidden (HTTP 403)"})
    c = line(run(facts), "kubernetes")
    assert c.status == FAIL
    assert c.message == "cannot read the API server's version: get: forbidden (HTTP 403)"


def test_kueue_not_installed() -> None:
    facts = replace(
        CLUSTER,
        api_groups={"ray.io": ("v1",)},
        crds=tuple(c for c in CLUSTER.crds or () if c.group != "kueue.x-k8s.io"),
        webhooks=(),
        controllers=tuple(c for c in CLUSTER.controllers or () if "kueue" not in c.name),
    )
    checks = run(facts)
    api = line(checks, "kueue-api")
    assert api.message == "API group kueue.x-k8s.io is not served: Kueue is not installed"
    assert api.fix.startswith("install Kueue v0.19.2 (kubectl apply --server-side -f https://")
    crds = line(checks, "kueue-crds")
    assert crds.status == FAIL and crds.message.startswith(
        "CRD clusterqueues.kueue.x-k8s.io, localqueues.kueue.x-k8s.io,"
    )
    assert crds.message.endswith("missing")
    hooks = line(checks, "kueue-webhooks")
    assert hooks.status == FAIL
    assert hooks.message == (
        "no MutatingWebhookConfiguration and ValidatingWebhookConfiguration of Kueue: "
        "Kueue would not suspend new Jobs for admission"
    )
    controller = line(checks, "kueue-controller")
    assert controller.status == WARN  # where findable: not finding it is no failure itself
    assert controller.message == (
        "no Deployment with a Kueue image found: its version is unknown (TauGrid supports 0.19.x)"
    )
    assert failed(checks) == ["kueue-api", "kueue-crds", "kueue-webhooks"]


def test_one_missing_crd_is_named() -> None:
    facts = replace(CLUSTER, crds=tuple(c for c in CLUSTER.crds or () if c.plural != "workloads"))
    c = line(run(facts), "kueue-crds")
    assert (c.status, c.message) == (FAIL, "CRD workloads.kueue.x-k8s.io missing")
    assert c.fix.startswith("reinstall Kueue v0.19.2 (kubectl apply")


def test_an_old_kueue_serves_v1beta1_only() -> None:
    facts = replace(
        CLUSTER,
        api_groups={"kueue.x-k8s.io": ("v1beta1",), "ray.io": ("v1",)},
        crds=tuple(
            replace(c, served=("v1beta1",)) if c.group == "kueue.x-k8s.io" else c
            for c in CLUSTER.crds or ()
        ),
        controllers=(
            Controller(
                "kueue-system",
                "kueue-controller-manager",
                ("registry.k8s.io/kueue/kueue:v0.12.3",),
                1,
                1,
            ),
            *(CLUSTER.controllers or ())[1:],
        ),
    )
    checks = run(facts)
    assert line(checks, "kueue-api").message == (
        "kueue.x-k8s.io serves v1beta1, not v1beta2: Kueue is older than 0.19.x"
    )
    crds = line(checks, "kueue-crds")
    assert crds.message.startswith("CRD clusterqueues.kueue.x-k8s.io,")
    assert "does not serve v1beta2 (clusterqueues.kueue.x-k8s.io serves v1beta1;" in crds.message
    assert crds.fix.startswith("upgrade to Kueue v0.19.2 (")
    c = line(checks, "kueue-controller")
    assert c.status == FAIL
    assert c.message == (
        "Kueue v0.12.3 (kueue-system/kueue-controller-manager) is not supported: TauGrid "
        "supports 0.19.x"
    )
    assert c.fix.startswith("install Kueue v0.19.2")


def test_a_newer_kuberay_is_not_supported_and_a_stopped_one_fails() -> None:
    newer = replace(
        CLUSTER,
        controllers=(
            (CLUSTER.controllers or ())[0],
            Controller("ray", "kuberay-operator", ("quay.io/kuberay/operator:v1.8.1",), 1, 1),
        ),
    )
    c = line(run(newer), "kuberay-controller")
    assert (c.status, c.message) == (
        FAIL,
        "KubeRay v1.8.1 (ray/kuberay-operator) is not supported: TauGrid supports 1.7.x",
    )
    assert c.fix.startswith("install KubeRay v1.7.0 (helm upgrade --install kuberay-operator")
    stopped = replace(
        CLUSTER,
        controllers=(
            (CLUSTER.controllers or ())[0],
            Controller("ray", "kuberay-operator", ("quay.io/kuberay/operator:v1.7.0",), 2, 0),
        ),
    )
    c = line(run(stopped), "kuberay-controller")
    assert (c.status, c.message) == (
        FAIL,
        "KubeRay's controller ray/kuberay-operator has 0 of 2 replicas ready",
    )
    assert c.fix == (
        "kubectl -n ray describe deployment kuberay-operator; "
        "kubectl -n ray logs deployment/kuberay-operator"
    )


def test_an_image_without_a_version_tag_is_a_warning() -> None:
    pinned = "registry.k8s.io/kueue/kueue@sha256:" + "a" * 64
    facts = replace(
        CLUSTER,
        controllers=(
            Controller("kueue-system", "kueue-controller-manager", (pinned,), 1, 1),
            *(CLUSTER.controllers or ())[1:],
        ),
    )
    checks = run(facts)
    c = line(checks, "kueue-controller")
    assert c.status == WARN and "no version in the tag (TauGrid supports 0.19.x)" in c.message
    assert ready(checks)
    assert summary(checks) == "cluster ready: 14 of 15 checks ok, 1 warning(s)"


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("registry.k8s.io/kueue/kueue:v0.19.2", (0, 19, 2)),
        ("quay.io/kuberay/operator:v1.7.0", (1, 7, 0)),
        ("localhost:5000/kueue:0.19.1-rc.1", (0, 19, 1)),
        ("localhost:5000/kueue", None),
        ("kueue:latest", None),
        ("kueue@sha256:abc", None),
    ],
)
def test_image_versions(image: str, version: tuple[int, int, int] | None) -> None:
    assert image_version(image) == version


def test_forbidden_lists_say_which_grant_is_missing() -> None:
    facts = replace(
        CLUSTER,
        crds=None,
        webhooks=None,
        controllers=None,
        errors={
            "crds": "list CustomResourceDefinition *: forbidden (HTTP 403)",
            "webhooks": "list MutatingWebhookConfiguration *: forbidden (HTTP 403)",
            "controllers": "list Deployment *: forbidden (HTTP 403)",
        },
    )
    checks = run(facts)
    crds = line(checks, "kueue-crds")
    assert crds.message == (
        "cannot read the CustomResourceDefinitions: list CustomResourceDefinition *: "
        "forbidden (HTTP 403)"
    )
    assert "customresourcedefinitions" in crds.fix
    assert line(checks, "kueue-webhooks").status == FAIL
    assert line(checks, "kuberay-webhooks").status == WARN  # optional anyway
    assert line(checks, "kueue-controller").status == WARN
    assert "list deployments" in line(checks, "kueue-controller").fix


def test_drift_fails_the_queue_lines_with_the_apply() -> None:
    policy = replace(
        POLICY,
        drift=(
            DriftItem(
                "ClusterQueue", "ClusterQueue team-a", "missing: not in the cluster", "missing"
            ),
            DriftItem(
                "LocalQueue",
                "LocalQueue tau-a/main",
                'spec.clusterQueue: is "x" in the cluster, the policy says "team-a"',
                "changed",
            ),
            DriftItem("Cohort", "Cohort old", "left over", "left_over"),
        ),
    )
    checks = run(policy=policy)
    cq = line(checks, "cluster-queues")
    assert cq.status == FAIL
    assert cq.message == "ClusterQueue team-a missing"  # the left-over is a lesser matter
    assert cq.fix == (
        "apply the policy again (idempotent): tau admin policy apply /etc/taugrid/policy.yaml"
    )
    lq = line(checks, "local-queues")
    assert lq.message == (
        'LocalQueue tau-a/main changed (spec.clusterQueue: is "x" in the cluster, the policy '
        'says "team-a")'
    )
    only_left = replace(
        POLICY, drift=(DriftItem("Cohort", "Cohort old", "left over", "left_over"),)
    )
    c = line(run(policy=only_left), "cluster-queues")
    assert (c.status, c.message) == (WARN, "Cohort old left over (not in the policy)")


def test_many_drifted_objects_are_counted_after_five() -> None:
    items = tuple(
        DriftItem("LocalQueue", f"LocalQueue ns/q{i}", "missing", "missing") for i in range(8)
    )
    c = line(run(policy=replace(POLICY, drift=items, builtin=True)), "local-queues")
    assert c.message.endswith(
        "LocalQueue ns/q4 missing; and 3 more (tau admin policy drift lists them)"
    )
    assert c.fix == "apply your policy: tau admin policy apply policy.yaml"


def test_a_cluster_that_cannot_be_compared_says_why() -> None:
    policy = replace(POLICY, drift=None, drift_error="list ClusterQueue *: not found (HTTP 404)")
    checks = run(policy=policy)
    for name in ("cluster-queues", "local-queues"):
        c = line(checks, name)
        assert c.status == FAIL
        assert c.message == (
            "cannot compare the cluster with the policy in force: list ClusterQueue *: not "
            "found (HTTP 404)"
        )


def test_a_flavor_matching_no_node_fails_and_names_its_labels() -> None:
    policy = replace(
        POLICY, flavors={"h100": {"gpu": "h100"}, "a100": {"gpu": "a100", "zone": "b"}}
    )
    checks = run(policy=policy)
    c = line(checks, "flavor a100")
    assert c.status == FAIL
    assert c.message == "no node has the labels gpu=a100,zone=b: runs admitted on it never schedule"
    assert c.fix == (
        "label its nodes (kubectl label node NODE gpu=a100 zone=b) or correct node_labels of "
        "flavor a100 in the policy"
    )
    assert failed(checks) == ["flavor a100"]


def test_gpu_nodes_matched_by_no_flavor_are_a_warning() -> None:
    policy = replace(POLICY, flavors={"h100": {"gpu": "h100"}})
    nodes = (*NODES, Node("gpu-9", {"gpu": "l4"}, 4))
    checks = run(replace(CLUSTER, nodes=nodes), policy, AgentReports({**SEEN, "gpu-9": NOW}))
    c = line(checks, "gpu-nodes")
    assert c.status == WARN
    assert c.message == (
        "GPU node(s) matched by no flavor: gpu-9 (4 GPUs): TauGrid never places runs there"
    )
    assert ready(checks)
    none = line(run(replace(CLUSTER, nodes=(Node("cpu-1", {}, 0),))), "gpu-nodes")
    assert none.status == WARN and none.message.startswith("no node offers nvidia.com/gpu")


def test_gpu_nodes_without_a_reporting_agent_fail_by_reason() -> None:
    nodes = (
        *NODES,
        Node("gpu-3", {"gpu": "h100"}, 8),
        Node("gpu-4", {"gpu": "h100"}, 8),
        Node("gpu-5", {"gpu": "h100"}, 8),
    )
    pods = (
        *(CLUSTER.agent_pods or ()),
        AgentPod("taugrid-system", "agent-d", "gpu-4", "Running", False, "CrashLoopBackOff"),
        AgentPod("taugrid-system", "agent-e", "gpu-5", "Running", True),
    )
    seen = {"gpu-1": NOW - 10, "gpu-2": NOW - 600}  # gpu-2 silent for 10 min
    checks = run(replace(CLUSTER, nodes=nodes, agent_pods=pods), agents=AgentReports(seen, 120))
    lines = [c for c in checks if c.check == "health-agents"]
    assert [c.status for c in lines] == [FAIL, FAIL, FAIL]
    assert lines[0].message == "no health agent pod on GPU node(s) gpu-3"
    assert "nodeSelector and tolerations" in lines[0].fix
    assert lines[1].message == (
        "the agent pod taugrid-system/agent-d on gpu-4 is not running (CrashLoopBackOff)"
    )
    assert lines[1].fix == (
        "kubectl -n taugrid-system describe pod agent-d; kubectl -n taugrid-system logs agent-d"
    )
    assert lines[2].message == (
        "agents run on gpu-2 (last 10 min ago), gpu-5 (never) but have not reported for over 2 min"
    )
    assert "token" in lines[2].fix


def test_health_off_is_a_warning() -> None:
    c = line(run(agents=AgentReports(None)), "health-agents")
    assert c.status == WARN and c.fix == "start the server with --health on (TAU_HEALTH=on)"


def test_the_policy_file_line() -> None:
    applied = replace(POLICY, policy_file=PolicyFile("/etc/taugrid/policy.yaml", "applied"))
    c = line(run(policy=applied), "policy-file")
    assert (c.status, c.message) == (
        OK,
        "policy file /etc/taugrid/policy.yaml is the policy in force (applied at start)",
    )
    bad = PolicyFile("/etc/taugrid/policy.yaml", "failed", "policy not applied (nothing stored)")
    c = line(run(policy=replace(POLICY, policy_file=bad)), "policy-file")
    assert c.status == FAIL
    assert c.message == (
        "policy file /etc/taugrid/policy.yaml was not applied at start: policy not applied "
        "(nothing stored)"
    )
    assert c.fix.endswith("tau admin policy apply /etc/taugrid/policy.yaml")
    by_hand = PolicyFile("/etc/taugrid/policy.yaml", "unchanged", in_force=False)
    c = line(run(policy=replace(POLICY, source="mine.yaml", policy_file=by_hand)), "policy-file")
    assert c.status == WARN
    assert c.message.startswith("the policy in force (mine.yaml) is not the policy file")
