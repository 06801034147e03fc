"""The policy-apply service path with a fake PolicyTarget (a cluster): validate, drift,
apply to the cluster, and only then store; nothing stored when the cluster refuses or the
policy cannot be rendered; local mode (no target) unchanged. Then the same through the
HTTP routes of a real app, and the CLI's lines for what they answer."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from taugrid.cli.commands.admin import cluster_lines, drift_lines
from taugrid.errors import SpecError, UsageError
from taugrid.policy import Policy
from taugrid.policy.cluster_objects import ObjectName
from taugrid.policy.drift import MISSING, Drift
from taugrid.ports.policy_target import ApplyReport, PolicyApplyFailed
from taugrid.server.app import create_app
from taugrid.server.queueing import Machine, Queueing
from taugrid.server.settings import ServerSettings
from taugrid.store import connect
from taugrid.store.policies import PolicyStore

POLICY = """\
flavors:
  - name: cpu
cluster_queues:
  - name: shared
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 64, memory: 64Gi}
workspaces:
  - name: a
    local_queues: [{name: main, cluster_queue: shared}]
priority_classes:
  - {name: normal, value: 1000, default: true}
"""
NS_A = ObjectName("Namespace", "a")
FLAVOR = ObjectName("ResourceFlavor", "cpu")
CQ = ObjectName("ClusterQueue", "shared")
WPC = ObjectName("WorkloadPriorityClass", "normal")
LQ = ObjectName("LocalQueue", "main", "a")
ALL = (NS_A, FLAVOR, CQ, WPC, LQ)


@dataclass
class FakeTarget:
    """A cluster that answers as told and records what it was asked."""

    report: ApplyReport = field(default_factory=lambda: ApplyReport(ALL))
    before: list[Drift] = field(default_factory=lambda: [Drift(LQ, MISSING, "missing")])
    render_error: str | None = None
    calls: list[tuple[str, Policy]] = field(default_factory=list)

    def apply(self, policy: Policy) -> ApplyReport:
        self.calls.append(("apply", policy))
        if self.render_error:
            raise UsageError(self.render_error)
        return self.report

    def drift(self, policy: Policy) -> list[Drift]:
        self.calls.append(("drift", policy))
        if self.render_error:
            raise UsageError(self.render_error)
        return self.before


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PolicyStore]:
    db = connect(f"sqlite:///{tmp_path / 'tau.db'}")
    yield PolicyStore(db)
    db.dispose()


def queueing(store: PolicyStore, target: FakeTarget | None) -> Queueing:
    return Queueing(store, Machine((), 8000, 1 << 34), lambda: ["a"], policy_target=target)


def test_applied_to_the_cluster_then_stored(store: PolicyStore) -> None:
    target = FakeTarget()
    q = queueing(store, target)

    done = q.apply(POLICY, "policy.yaml", "root")

    assert [c for c, _ in target.calls] == ["drift", "apply"]  # drift is what was there before
    assert target.calls[0][1].cluster_queues[0].name == "shared"
    assert done.cluster == target.report and done.drift_before == tuple(target.before)
    assert not done.policy.builtin and done.policy.source == "policy.yaml"
    assert store.current() is not None and q.policy.hash == done.policy.hash


def test_a_refused_object_stores_nothing_and_says_what_was_applied(store: PolicyStore) -> None:
    failed = ApplyReport(
        (NS_A, FLAVOR),
        CQ,
        "apply ClusterQueue shared: admission webhook denied the request (HTTP 422)",
        (WPC, LQ),
    )
    q = queueing(store, FakeTarget(report=failed))

    with pytest.raises(PolicyApplyFailed) as caught:
        q.apply(POLICY, "policy.yaml", "root")

    assert caught.value.message == (
        "policy not applied (nothing stored): ClusterQueue shared failed: apply ClusterQueue "
        "shared: admission webhook denied the request (HTTP 422); applied before it: "
        "1 Namespace, 1 ResourceFlavor; not applied: it and 2 after it; fix the cause and "
        "apply again (applying is idempotent)"
    )
    assert caught.value.to_dict()["applied"] == ["Namespace a", "ResourceFlavor cpu"]
    assert caught.value.to_dict()["not_applied"] == [
        "WorkloadPriorityClass normal",
        "LocalQueue a/main",
    ]
    assert store.current() is None and q.policy.builtin  # the old policy stays in force


def test_a_policy_that_cannot_be_rendered_stores_nothing(store: PolicyStore) -> None:
    target = FakeTarget(render_error="namespace 'Tau_a' is not a DNS-1123 label")
    q = queueing(store, target)
    with pytest.raises(UsageError, match="DNS-1123"):
        q.apply(POLICY, "policy.yaml", "root")
    assert store.current() is None and q.policy.builtin


def test_an_invalid_policy_never_reaches_the_cluster(store: PolicyStore) -> None:
    target = FakeTarget()
    with pytest.raises(SpecError):
        queueing(store, target).apply(POLICY.replace("flavor: cpu", "flavor: nope"), "p.yaml")
    assert target.calls == [] and store.current() is None


def test_local_mode_stores_as_before(store: PolicyStore) -> None:
    q = queueing(store, None)
    done = q.apply(POLICY, "policy.yaml", "root")
    assert done.cluster is None and done.drift_before == ()
    assert store.current() is not None
    assert q.drift() is None


def test_drift_is_of_the_policy_in_force_the_built_in_one_too(store: PolicyStore) -> None:
    target = FakeTarget(before=[])
    q = queueing(store, target)
    assert q.drift() == []
    assert [ws.name for ws in target.calls[-1][1].workspaces] == ["default", "a"]  # built-in
    q.apply(POLICY, "policy.yaml")
    q.drift()
    assert target.calls[-1][1].cluster_queues[0].name == "shared"


# -- through HTTP, and what the CLI prints of it ------------------------------------------


@dataclass
class Api:
    client: TestClient
    target: FakeTarget
    queueing: Queueing


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    settings = ServerSettings(
        home=tmp_path / "home", db_url=f"sqlite:///{tmp_path / 't.db'}", gpus=0
    )
    app = create_app(settings)
    with TestClient(app) as client:
        target = FakeTarget()
        # What a cluster composition root does when it builds Queueing (app.py is local).
        q: Queueing = app.state.service.queueing
        q.policy_target = target
        token = (settings.home / "token").read_text().strip()
        client.headers["Authorization"] = f"Bearer {token}"
        yield Api(client, target, q)


def test_the_routes_answer_what_was_applied_and_the_drift(
    api: Api,
) -> None:
    client, target = api.client, api.target
    target.before = [
        Drift(NS_A, MISSING, "missing"),
        Drift(LQ, MISSING, "missing"),
        Drift(CQ, 'spec.queueingStrategy: is "StrictFIFO" in the cluster, ...', "changed"),
    ]
    resp = client.put("/api/v1/admin/policy", json={"source": "policy.yaml", "text": POLICY})
    assert resp.status_code == 200, resp.text
    cluster = resp.json()["cluster"]
    assert cluster["applied"] == [str(o) for o in ALL]
    assert cluster["counts"] == {
        "Namespace": 1,
        "ResourceFlavor": 1,
        "ClusterQueue": 1,
        "WorkloadPriorityClass": 1,
        "LocalQueue": 1,
    }
    assert cluster["drift_before"][0] == {
        "object": "Namespace a",
        "kind": "Namespace",
        "state": "missing",
        "what": MISSING,
    }
    assert cluster_lines(cluster) == [
        "drift before applying:",
        "  missing from the cluster: 1 Namespace, 1 LocalQueue",
        '  ClusterQueue shared: spec.queueingStrategy: is "StrictFIFO" in the cluster, ...',
        "applied to the cluster (server-side apply):",
        "  Namespace: 1",
        "  ResourceFlavor: 1",
        "  ClusterQueue: 1",
        "  WorkloadPriorityClass: 1",
        "  LocalQueue: 1",
    ]

    target.before = []
    drift = client.get("/api/v1/admin/policy/drift").json()
    assert drift == {"cluster": True, "source": "policy.yaml", "hash": drift["hash"], "drift": []}
    assert drift_lines(drift["drift"]) == ["no drift"]


def test_a_refused_apply_answers_502_and_stores_nothing(api: Api) -> None:
    client, target = api.client, api.target
    target.report = ApplyReport(
        (NS_A,), FLAVOR, "apply ResourceFlavor cpu: forbidden (HTTP 403)", (CQ, WPC, LQ)
    )
    resp = client.put("/api/v1/admin/policy", json={"source": "policy.yaml", "text": POLICY})
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert error["code"] == "policy_apply_failed" and error["failed"] == "ResourceFlavor cpu"
    assert "forbidden (HTTP 403)" in error["message"]
    assert client.get("/api/v1/admin/policy").json()["builtin"] is True


def test_local_mode_answers_no_cluster(api: Api) -> None:
    client = api.client
    api.queueing.policy_target = None
    resp = client.put("/api/v1/admin/policy", json={"source": "policy.yaml", "text": POLICY})
    assert resp.json()["cluster"] is None and cluster_lines(None) == []
    assert client.get("/api/v1/admin/policy/drift").json()["cluster"] is False
