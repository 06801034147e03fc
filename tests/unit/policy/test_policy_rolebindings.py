"""Each workspace Namespace's RoleBinding of the workspace ClusterRole
(policy/workspace_access.py): only when the access is configured, between the Namespaces
and the LocalQueues in apply order, labelled like the rest, strictly valid for
Kubernetes 1.32, and covered by drift. Also where the server finds its ServiceAccount
(the setting, a bare name in the pod's namespace, the pod's own token)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from k8s_validate import K8S_VERSION
from taugrid.errors import UsageError
from taugrid.executors.kubernetes.service_account import pod_namespace, pod_service_account
from taugrid.policy import load_policy_text
from taugrid.policy.cluster_objects import (
    POLICY_KINDS,
    ObjectName,
    desired_objects,
    policy_kinds,
)
from taugrid.policy.drift import drift
from taugrid.policy.workspace_access import WorkspaceAccess
from taugrid.server.cluster import workspace_access
from taugrid.server.settings import ServerSettings

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
  - name: team-b
    local_queues: [{name: main, cluster_queue: shared}]
"""
).policy
ACCESS = WorkspaceAccess.of("taugrid-workspace", "taugrid-system/taugrid")


def bindings(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "RoleBinding"]


def test_without_the_access_nothing_changes() -> None:
    assert bindings(desired_objects(POLICY, "tau-")) == []
    assert policy_kinds() == POLICY_KINDS
    assert ("rbac.authorization.k8s.io/v1", "RoleBinding") not in POLICY_KINDS


def test_each_workspace_namespace_gets_the_binding_in_order() -> None:
    objects = desired_objects(POLICY, "tau-", ACCESS)
    named = [str(ObjectName.of(o)) for o in objects if o["kind"] != "WorkloadPriorityClass"]
    assert named == [
        "Namespace tau-team-a",
        "Namespace tau-team-b",
        "ResourceFlavor cpu",
        "ClusterQueue shared",
        "RoleBinding tau-team-a/taugrid-workspace",
        "RoleBinding tau-team-b/taugrid-workspace",
        "LocalQueue tau-team-a/main",
        "LocalQueue tau-team-b/main",
    ]
    kinds = [k for _, k in policy_kinds(ACCESS)]
    assert kinds.index("Namespace") < kinds.index("RoleBinding") < kinds.index("LocalQueue")
    first = bindings(objects)[0]
    assert first == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": "taugrid-workspace",
            "namespace": "tau-team-a",
            "labels": {"taugrid.io/workspace": "team-a", "taugrid.io/managed-by": "taugrid"},
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "taugrid-workspace",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "taugrid", "namespace": "taugrid-system"}],
    }


def test_the_bindings_are_strictly_valid() -> None:
    for obj in bindings(desired_objects(POLICY, "tau-", ACCESS)):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)  # raises when not
    bad = {**bindings(desired_objects(POLICY, "", ACCESS))[0], "subject": []}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_drift_covers_them() -> None:
    desired = desired_objects(POLICY, "tau-", ACCESS)
    live = [o for o in desired if o["kind"] != "RoleBinding"]
    changed = json.loads(json.dumps(bindings(desired)[1]))
    changed["subjects"][0]["name"] = "someone-else"
    found = drift(desired, [*live, changed])
    assert [(str(d.object), d.state) for d in found] == [
        ("RoleBinding tau-team-a/taugrid-workspace", "missing"),
        ("RoleBinding tau-team-b/taugrid-workspace", "changed"),
    ]
    assert "subjects[someone-else]: in the cluster, not in the policy" in found[1].what
    # A binding the policy no longer has (its workspace removed) is left over.
    old = {**bindings(desired)[0], "metadata": {**bindings(desired)[0]["metadata"]}}
    old["metadata"]["namespace"] = "tau-gone"
    assert [d.state for d in drift(desired, [*desired, old])] == ["left_over"]


@pytest.mark.parametrize(
    ("role", "account", "words"),
    [
        ("taugrid-workspace", "taugrid", "is not namespace/name"),
        ("taugrid-workspace", "Bad_NS/taugrid", "is not namespace/name"),
        ("Not A Role", "ns/taugrid", "is not a valid name"),
    ],
)
def test_bad_names_are_refused(role: str, account: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        WorkspaceAccess.of(role, account)


def token_dir(tmp_path: Path, subject: str, namespace: str = "taugrid-system") -> Path:
    claims = base64.urlsafe_b64encode(json.dumps({"sub": subject}).encode()).rstrip(b"=")
    (tmp_path / "token").write_text(f"eyJhbGciOiJSUzI1NiJ9.{claims.decode()}.c2ln")
    (tmp_path / "namespace").write_text(namespace + "\n")
    return tmp_path


def test_the_pod_s_own_service_account(tmp_path: Path) -> None:
    sa = token_dir(tmp_path, "system:serviceaccount:taugrid-system:taugrid")
    assert pod_service_account(sa) == "taugrid-system/taugrid"
    assert pod_namespace(sa) == "taugrid-system"
    assert pod_service_account(token_dir(tmp_path, "system:node:n1")) is None
    (tmp_path / "token").write_text("not-a-jwt")
    assert pod_service_account(tmp_path) is None
    assert pod_service_account(tmp_path / "absent") is None
    assert pod_namespace(tmp_path / "absent") is None


def settings(tmp_path: Path, **kw: Any) -> ServerSettings:
    return ServerSettings(tmp_path, "sqlite://", executor="kubernetes", **kw)


def test_where_the_server_finds_whom_to_bind(tmp_path: Path) -> None:
    def pod(account: str | None, ns: str | None = "taugrid-system") -> dict[str, Any]:
        return {"pod_account": lambda: account, "pod_ns": lambda: ns}

    assert workspace_access(settings(tmp_path), **pod("x/y")) is None  # no role: none
    role = {"workspace_role": "taugrid-workspace"}
    given = workspace_access(settings(tmp_path, service_account="ops/tau", **role), **pod(None))
    assert given == WorkspaceAccess("taugrid-workspace", "tau", "ops")
    bare = workspace_access(settings(tmp_path, service_account="tau", **role), **pod(None))
    assert bare == WorkspaceAccess("taugrid-workspace", "tau", "taugrid-system")
    own = workspace_access(settings(tmp_path, **role), **pod("taugrid-system/taugrid"))
    assert own == WorkspaceAccess("taugrid-workspace", "taugrid", "taugrid-system")
    with pytest.raises(UsageError, match="set TAU_SERVICE_ACCOUNT=namespace/name"):
        workspace_access(settings(tmp_path, **role), **pod(None, None))


def test_the_chart_s_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAU_WORKSPACE_CLUSTERROLE", "rel-workspace")
    monkeypatch.setenv("TAU_SERVICE_ACCOUNT", "rel")
    monkeypatch.setenv("TAU_SERVICE_ACCOUNT_NAMESPACE", "taugrid")
    got = ServerSettings.from_env(tmp_path)
    assert (got.workspace_role, got.service_account) == ("rel-workspace", "taugrid/rel")
    monkeypatch.delenv("TAU_WORKSPACE_CLUSTERROLE")
    monkeypatch.delenv("TAU_SERVICE_ACCOUNT_NAMESPACE")
    monkeypatch.setenv("TAU_WORKSPACE_ROLE", "other")
    monkeypatch.setenv("TAU_SERVICE_ACCOUNT", "ops/tau")
    got = ServerSettings.from_env(tmp_path)
    assert (got.workspace_role, got.service_account) == ("other", "ops/tau")
