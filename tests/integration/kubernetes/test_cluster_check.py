"""``tau admin cluster check`` against the emulator: the adapter's reads (API version and
discovery, CRDs, webhooks, Deployments, nodes, the agents' pods; a forbidden list is one
fact missing, not a failure), then a real cluster server and the real CLI on a ready
cluster (exit 0) and on one that is not (a Kueue CRD missing, KubeRay of another
version, a flavor matching no node, a GPU node without an agent: exit 11, each named).

kmock serves discovery only for the kinds it is told of and says Kubernetes 1.26: the
test seeds the CRDs, webhooks and controllers a real install has and answers /version.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tauproc import Tau, write_spec

from kube_emulator import KubeEmulator
from taugrid.executors.kubernetes.cluster_facts import KubeClusterInspector
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient

pytestmark = pytest.mark.timeout(90)

KUEUE_CRDS = (
    "clusterqueues",
    "localqueues",
    "workloads",
    "resourceflavors",
    "cohorts",
    "workloadpriorityclasses",
)
POLICY = """\
flavors:
  - name: h100
    gpu_type: h100
    node_labels: {taugrid.io/gpu: h100}
cluster_queues:
  - name: team
    resources:
      - flavor: h100
        quotas: {gpu: 16, cpu: 64, memory: 256Gi}
workspaces:
  - name: demo
    local_queues: [{name: main, cluster_queue: team}]
"""
A100_FLAVOR = """\
  - name: a100
    gpu_type: a100
    node_labels: {taugrid.io/gpu: a100}
"""


def crd(plural: str, group: str, kind: str, *served: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"plural": plural, "kind": kind},
            "scope": "Cluster",
            "versions": [
                {"name": v, "served": True, "storage": i == 0} for i, v in enumerate(served)
            ],
        },
    }


def webhook(kind: str, name: str, service: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "mjob.kb.io",
                "clientConfig": {"service": {"name": service, "namespace": namespace}},
            }
        ],
    }


def deployment(namespace: str, name: str, image: str, ready: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "manager", "image": image}]}},
        },
        "status": {"replicas": 1, "readyReplicas": ready},
    }


def node(name: str, gpus: int, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"}},
    }


def agent_pod(node_name: str, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"tau-health-agent-{node_name}",
            "namespace": "taugrid-system",
            "labels": {"app.kubernetes.io/component": "health-agent"},
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "agent", "image": "x"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def install(emulator: KubeEmulator, *, kuberay: str = "v1.7.0", workloads_crd: bool = True) -> None:
    """What Kueue v0.19.2 and KubeRay install, and two H100 nodes and a CPU node."""
    assert emulator.emulator is not None
    emulator.emulator["get /version"] << {"major": "1", "minor": "32", "gitVersion": "v1.32.3"}
    for plural in KUEUE_CRDS:
        if plural != "workloads" or workloads_crd:
            kind = plural[:-1].capitalize()
            emulator.put(crd(plural, "kueue.x-k8s.io", kind, "v1beta2", "v1beta1"))
    for plural, kind in (("rayjobs", "RayJob"), ("rayclusters", "RayCluster")):
        emulator.put(crd(plural, "ray.io", kind, "v1", "v1alpha1"))
    emulator.put(crd("jobsets", "jobset.x-k8s.io", "JobSet", "v1alpha2"))  # someone else's
    for kind, name in (
        ("MutatingWebhookConfiguration", "kueue-mutating-webhook-configuration"),
        ("ValidatingWebhookConfiguration", "kueue-validating-webhook-configuration"),
    ):
        emulator.put(webhook(kind, name, "kueue-webhook-service", "kueue-system"))
    emulator.put(
        deployment(
            "kueue-system", "kueue-controller-manager", "registry.k8s.io/kueue/kueue:v0.19.2"
        )
    )
    emulator.put(
        deployment("kuberay-system", "kuberay-operator", f"quay.io/kuberay/operator:{kuberay}")
    )
    emulator.put(deployment("default", "web", "nginx:1.27"))  # not an add-on
    emulator.put(node("gpu-1", 8, {"taugrid.io/gpu": "h100"}))
    emulator.put(node("gpu-2", 8, {"taugrid.io/gpu": "h100"}))
    emulator.put(node("cpu-1", 0, {"pool": "cpu"}))
    for name in ("gpu-1", "gpu-2"):
        emulator.put(agent_pod(name))


# -- the adapter ------------------------------------------------------------------------------
def test_the_inspector_reads_what_an_install_has(
    kube_emulator: KubeEmulator, kube: LightkubeClient
) -> None:
    install(kube_emulator)
    facts = KubeClusterInspector(kube).facts()
    assert facts.errors == {}
    assert facts.version is not None and facts.version.git_version == "v1.32.3"
    assert facts.api_groups is not None and facts.api_groups["kueue.x-k8s.io"] == ("v1beta2",)
    crds = {c.name: c for c in facts.crds or ()}
    assert crds["workloads.kueue.x-k8s.io"].served == ("v1beta2", "v1beta1")
    assert crds["rayjobs.ray.io"].plural == "rayjobs"
    hooks = {w.name: w for w in facts.webhooks or ()}
    assert hooks["kueue-mutating-webhook-configuration"].kind == "mutating"
    assert hooks["kueue-mutating-webhook-configuration"].services == (
        "kueue-system/kueue-webhook-service",
    )
    names = sorted(c.name for c in facts.controllers or ())
    assert names == ["kuberay-operator", "kueue-controller-manager"]  # not "web"
    assert {n.name: n.gpus for n in facts.nodes or ()} == {"gpu-1": 8, "gpu-2": 8, "cpu-1": 0}
    assert sorted((p.node, p.ready) for p in facts.agent_pods or ()) == [
        ("gpu-1", True),
        ("gpu-2", True),
    ]


def test_a_forbidden_list_is_one_fact_missing(
    kube_emulator: KubeEmulator, kube: LightkubeClient
) -> None:
    install(kube_emulator)
    kube_emulator.fail_next("list customresourcedefinitions", 403, message="forbidden: no grant")
    facts = KubeClusterInspector(kube).facts()
    assert facts.crds is None
    assert "forbidden: no grant (HTTP 403)" in facts.errors["crds"]
    assert facts.nodes is not None and facts.webhooks is not None  # the rest was read


# -- the server and the CLI ---------------------------------------------------------------------
def report(tau: Tau, node_name: str) -> None:
    """The node's agent says it lives (its heartbeat: a report without observations)."""
    body = json.dumps({"node": node_name, "observations": [], "gpus": []}).encode()
    req = urllib.request.Request(
        tau.server_info()["url"] + "/api/v1/health/reports",
        data=body,
        headers={"Authorization": f"Bearer {tau.token()}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def test_a_ready_cluster_then_one_that_is_not(
    tau: Tau, kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    install(kube_emulator)
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    # The policy comes from the chart's policy file: applied to the cluster at start.
    policy = write_spec(tmp_path / "etc", POLICY, "policy.yaml")
    tau(
        "server",
        "start",
        "--executor",
        "kubernetes",
        "--kubeconfig",
        str(config),
        "--namespace-prefix",
        "tau-",
        TAU_POLICY_FILE=str(policy),
        check=True,
    )
    try:
        assert kube_emulator.get("kueue.x-k8s.io/v1beta2", "LocalQueue", "tau-demo", "main")
        assert tau.json("admin", "policy", "show")["applied_by"] == "policy-file"
        for name in ("gpu-1", "gpu-2"):
            report(tau, name)

        ok = tau("admin", "cluster", "check")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        lines = ok.stdout.splitlines()
        assert lines[0] == "ok    kubernetes: Kubernetes v1.32.3 (1.30 or newer)"
        assert (
            "ok    kueue-controller: Kueue v0.19.2 (kueue-system/kueue-controller-manager, "
            "1/1 ready)"
        ) in lines
        assert "ok    flavor h100: 2 node(s) with taugrid.io/gpu=h100 (16 GPU(s))" in lines
        assert "ok    health-agents: an agent reports from each of the 2 GPU node(s)" in lines
        assert lines[-2] == (
            f"ok    policy-file: policy file {policy} is the policy in force (applied at start)"
        )
        assert all(line.startswith("ok  ") for line in lines[:-1]), lines
        assert lines[-1].startswith("cluster ready: ")
        data = tau.json("admin", "cluster", "check")
        assert data["ready"] is True
        assert {c["check"] for c in data["checks"]} >= {"kueue-crds", "local-queues", "gpu-nodes"}

        # Now break it: a Kueue CRD gone, KubeRay of another version, a flavor no node
        # has (applied by hand: the policy file is no longer in force), a GPU node that
        # no agent watches.
        kube_emulator.delete(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "workloads.kueue.x-k8s.io"
        )
        kube_emulator.put(
            deployment("kuberay-system", "kuberay-operator", "quay.io/kuberay/operator:v1.5.1")
        )
        broken = POLICY.replace("cluster_queues:", A100_FLAVOR + "cluster_queues:")
        broken = broken.replace(
            "      - flavor: h100\n        quotas: {gpu: 16, cpu: 64, memory: 256Gi}\n",
            "      - flavor: h100\n        quotas: {gpu: 16, cpu: 64, memory: 256Gi}\n"
            "      - flavor: a100\n        quotas: {gpu: 8, cpu: 32, memory: 128Gi}\n",
        )
        by_hand = write_spec(tmp_path, broken, "broken.yaml")
        tau("admin", "policy", "apply", str(by_hand), check=True)
        kube_emulator.put(node("gpu-3", 8, {"taugrid.io/gpu": "h100"}))

        bad = tau("admin", "cluster", "check")
        assert bad.returncode == 11, bad.stdout + bad.stderr
        out = bad.stdout.splitlines()
        fails = [line for line in out if line.startswith("FAIL")]
        assert len(fails) == 4, out
        assert fails[0].startswith("FAIL  kueue-crds: CRD workloads.kueue.x-k8s.io missing; fix: ")
        assert fails[1].startswith(
            "FAIL  kuberay-controller: KubeRay v1.5.1 (kuberay-system/kuberay-operator) is not "
            "supported: TauGrid supports 1.7.x; fix: install KubeRay v1.7.0 (helm upgrade"
        )
        assert fails[2].startswith(
            "FAIL  flavor a100: no node has the labels taugrid.io/gpu=a100: runs admitted on "
            "it never schedule; fix: label its nodes (kubectl label node NODE "
            "taugrid.io/gpu=a100)"
        )
        assert fails[3].startswith(
            "FAIL  health-agents: no health agent pod on GPU node(s) gpu-3; fix: "
        )
        assert bad.stderr == (
            "tau: cluster not ready: 4 of 16 checks failed (kueue-crds, kuberay-controller, "
            "flavor a100, health-agents), 1 warning(s)\n"
        )
        assert out[-1].startswith(
            f"warn  policy-file: the policy in force ({tmp_path / 'broken.yaml'}) is not the "
            f"policy file {policy}'s"
        )
        assert "Traceback" not in bad.stderr
        as_json = tau("admin", "cluster", "check", "-o", "json")
        assert as_json.returncode == 11
        assert json.loads(as_json.stdout)["ready"] is False
    finally:
        tau("server", "stop", timeout=30)


def test_a_local_server_says_the_check_is_for_a_cluster(tau: Tau) -> None:
    tau.start_server("--gpus", "0")
    proc = tau("admin", "cluster", "check")
    assert proc.returncode == 2
    assert proc.stderr == (
        "tau: this server runs workloads as local processes: tau admin cluster check checks "
        "a Kubernetes cluster (a server started with --executor kubernetes)\n"
    )
