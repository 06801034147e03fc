"""deploy/helm: the core chart's RBAC, checked without a cluster.

The server's roles grant the kinds and verbs of executors/kubernetes KINDS that the code
uses and no more (workspace-scoped or cluster-wide), the admission policy holds its
RoleBindings to workspace namespaces (its CEL evaluated with cel-python), and the GPU
health agent may read nodes and nothing else.
Nothing here talks to a cluster: docs/install.md says what was not run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
from chartkit import (
    NAMESPACE,
    RELEASE,
    Obj,
    ci,
    env_of,
    kinds,
    one,
    problems_of,
    render,
    server_container,
)

from taugrid.executors.kubernetes.client import KINDS
from taugrid.policy import load_policy_text
from taugrid.policy.cluster_objects import POLICY_KINDS

# -- RBAC ------------------------------------------------------------------------------------
READ = {"get", "list", "watch"}
# What the server does to each kind of KINDS (src/taugrid/executors/kubernetes): "cluster"
# anywhere (informers, the GPU health controller, the policy's cluster objects, `tau admin
# cluster check`), "workspace" in workspace namespaces only. Server-side apply is the verb
# patch (create beside it).
NEEDED: dict[tuple[str, str], dict[str, set[str]]] = {
    ("v1", "Namespace"): {"cluster": {"get", "list", "create", "patch"}},
    ("v1", "Node"): {"cluster": {"get", "list", "patch"}},
    ("v1", "Pod"): {"cluster": READ},
    ("v1", "Service"): {"workspace": {"get", "create", "delete"}},
    ("v1", "Secret"): {"workspace": {"get", "list", "create", "delete", "patch"}},
    ("batch/v1", "Job"): {"cluster": READ, "workspace": {"create", "delete"}},
    ("ray.io/v1", "RayJob"): {"cluster": READ, "workspace": {"create", "delete"}},
    ("ray.io/v1", "RayCluster"): {"cluster": READ},
    ("kueue.x-k8s.io/v1beta2", "Workload"): {"cluster": READ},
    **{kind: {"cluster": {"get", "list", "create", "patch"}} for kind in POLICY_KINDS},
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): {"cluster": {"get", "list"}},
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): {"cluster": {"list"}},
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): {"cluster": {"list"}},
    ("apps/v1", "Deployment"): {"cluster": {"list"}},
    # Each workspace namespace's RoleBinding of the workspace role (policy_sync.py), only
    # when the chart sets TAU_WORKSPACE_CLUSTERROLE (rbac.workspaceScoped).
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): {"scoped": {"get", "list", "create", "patch"}},
}
SUBRESOURCES = {
    ("", "pods/log"): {"cluster": {"get"}},  # tau logs
    ("", "pods/eviction"): {"cluster": {"create"}},  # hardware faults, L3 nodes
    ("", "nodes/status"): {"cluster": {"patch"}},  # the GPUHealthy condition
    ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads"): {"workspace": {"get"}},
}
NOT_USED = {("v1", "Event")}  # in KINDS, touched by no code path today


def grants(role: Obj) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        assert "*" not in rule["apiGroups"], rule
        if rule.get("resourceNames"):
            continue  # checked on its own below
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def needed() -> dict[tuple[str, str], dict[str, set[str]]]:
    out = dict(SUBRESOURCES)
    for (api_version, kind), info in KINDS.items():
        if (api_version, kind) in NOT_USED:
            continue
        assert (api_version, kind) in NEEDED, (
            f"{kind} ({api_version}) is new in KINDS: say what TauGrid does to it in NEEDED "
            "and grant it in deploy/helm/taugrid/templates/rbac-*.yaml"
        )
        out[(api_version.rpartition("/")[0], info.plural)] = NEEDED[(api_version, kind)]
    return out


@pytest.mark.parametrize("scoped", [True, False], ids=["workspace-scoped", "cluster-wide"])
def test_rbac_grants_what_the_code_does_and_no_more(helm: str, chart: Path, scoped: bool) -> None:
    objs = render(helm, chart, ci("default" if scoped else "external-db-url"))
    server = grants(one(objs, "ClusterRole", f"{RELEASE}-server"))
    workspace_role = one(objs, "ClusterRole", f"{RELEASE}-workspace")
    workspace = grants(workspace_role)
    for key, scopes in needed().items():
        lacking = scopes.get("cluster", set()) - server.get(key, set())
        if scoped:
            lacking |= scopes.get("scoped", set()) - server.get(key, set())
        assert not lacking, f"{RELEASE}-server: {key[1]} ({key[0] or 'core'}) lacks {lacking}"
        lacking = (
            scopes.get("workspace", set()) - server.get(key, set()) - workspace.get(key, set())
        )
        assert not lacking, f"{RELEASE}-workspace: {key[1]} ({key[0] or 'core'}) lacks {lacking}"
    # Never more than reading Kueue's Workloads: Kueue owns them.
    assert server[("kueue.x-k8s.io", "workloads")] == READ
    assert ("kueue.x-k8s.io", "workloads") not in workspace
    # No Secret, Service or Job write, and no Secret read, outside workspace namespaces.
    for resource in ("secrets", "services"):
        assert ("", resource) not in server, resource
    for key in (("batch", "jobs"), ("ray.io", "rayjobs")):
        assert server[key] == READ
    # Writes the code never does: no delete outside workspaces, no escalate.
    for key, verbs in server.items():
        assert not {"delete", "deletecollection", "escalate", "impersonate"} & verbs, key
    bind_rules = [
        r for r in one(objs, "ClusterRole", f"{RELEASE}-server")["rules"] if r.get("resourceNames")
    ]
    env = env_of(server_container(objs))
    if scoped:
        # Per workspace namespace: RoleBindings of the workspace role, which it may bind.
        assert bind_rules == [
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles"],
                "verbs": ["bind"],
                "resourceNames": [workspace_role["metadata"]["name"]],
            }
        ]
        assert {"create", "patch"} <= server[("rbac.authorization.k8s.io", "rolebindings")]
        assert env["TAU_WORKSPACE_CLUSTERROLE"] == workspace_role["metadata"]["name"]
        assert env["TAU_SERVICE_ACCOUNT"] == {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}
        assert ("ClusterRoleBinding", f"{RELEASE}-workspace") not in kinds(objs)
    else:
        assert bind_rules == []
        assert ("rbac.authorization.k8s.io", "rolebindings") not in server
        assert "TAU_WORKSPACE_CLUSTERROLE" not in env
        binding = one(objs, "ClusterRoleBinding", f"{RELEASE}-workspace")
        assert binding["roleRef"]["name"] == workspace_role["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}
        ]
        assert ("ValidatingAdmissionPolicy", f"{RELEASE}-workspace-rolebindings") not in kinds(objs)


def test_the_admission_policy_admits_the_role_bindings_the_server_renders(
    helm: str, chart: Path
) -> None:
    """What the server applies for the chart's policy (the same function as `tau admin
    policy apply`, with the access the chart's environment gives) gets past the chart's
    admission policy, and lands in namespaces the policy names."""
    from taugrid.policy.cluster_objects import desired_objects
    from taugrid.policy.workspace_access import WorkspaceAccess

    objs = render(helm, chart, ci("multi-workspace"))
    env = env_of(server_container(objs))
    sa = one(objs, "Deployment", RELEASE)["spec"]["template"]["spec"]["serviceAccountName"]
    access = WorkspaceAccess.of(env["TAU_WORKSPACE_CLUSTERROLE"], f"{NAMESPACE}/{sa}")
    text = one(objs, "ConfigMap", f"{RELEASE}-policy")["data"]["policy.yaml"]
    policy = load_policy_text(text, "policy.yaml").policy
    bindings = [
        o
        for o in desired_objects(policy, env["TAU_NAMESPACE_PREFIX"], access)
        if o["kind"] == "RoleBinding"
    ]
    assert len(bindings) == len(policy.workspaces)
    spec = one(objs, "ValidatingAdmissionPolicy", f"{RELEASE}-workspace-rolebindings")["spec"]
    request = {"userInfo": {"username": f"system:serviceaccount:{NAMESPACE}:{sa}"}}
    for binding in bindings:
        assert problems_of(binding) == []
        request["namespace"] = binding["metadata"]["namespace"]
        for validation in spec["validations"]:
            assert cel(validation["expression"], request=request, object=binding), validation


def test_the_agent_may_read_nodes_and_nothing_else(helm: str, chart: Path) -> None:
    objs = render(helm, chart, ci("default"))
    role = one(objs, "ClusterRole", f"{RELEASE}-health-agent")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = one(objs, "ClusterRoleBinding", f"{RELEASE}-health-agent")
    pod = one(objs, "DaemonSet", f"{RELEASE}-health-agent")["spec"]["template"]["spec"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}
    ]
    assert pod["serviceAccountName"] != RELEASE  # not the server's identity
    off = render(helm, chart, ci("health-off"))
    assert not [o for o in off if "health-agent" in o["metadata"]["name"]]


def cel(expression: str, **activation: Any) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    result = program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    assert not isinstance(result, celpy.CELEvalError), result
    return bool(result)


def test_the_admission_policy_holds_the_server_to_workspace_namespaces(
    helm: str, chart: Path
) -> None:
    objs = render(helm, chart, ci("default"))
    policy = one(objs, "ValidatingAdmissionPolicy", f"{RELEASE}-workspace-rolebindings")
    binding = one(objs, "ValidatingAdmissionPolicyBinding", policy["metadata"]["name"])
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    spec = policy["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["rolebindings"]
    me = {"username": f"system:serviceaccount:{NAMESPACE}:{RELEASE}"}
    (condition,) = spec["matchConditions"]
    assert cel(condition["expression"], request={"userInfo": me})
    assert not cel(condition["expression"], request={"userInfo": {"username": "alice"}})
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
    good: Obj = {
        "roleRef": {**role_ref, "name": f"{RELEASE}-workspace"},
        "subjects": [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}],
    }

    def allowed(namespace: str, obj: Obj) -> bool:
        request = {"namespace": namespace, "userInfo": me}
        return all(cel(v["expression"], request=request, object=obj) for v in spec["validations"])

    assert allowed("tau-team-a", good)
    assert not allowed("kube-system", good)
    assert not allowed("tau-team-a", {**good, "roleRef": {**good["roleRef"], "name": "admin"}})
    other = {"kind": "ServiceAccount", "name": "default", "namespace": "tau-team-a"}
    assert not allowed("tau-team-a", {**good, "subjects": [*good["subjects"], other]})
    assert not allowed("tau-team-a", {"roleRef": good["roleRef"]})  # no subjects: refused
