"""The policy file applied at start (server/policy_file.py) on a real PolicyStore: a new
file is recorded as ``tau admin policy apply`` records it (through the cluster's policy
target first, applied by ``policy-file``, audited); the same text again records nothing;
a bad file is refused before start in one ``file:line:col`` line; a refused apply leaves
the policy in force and says why. Then the real app started with the setting."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from taugrid.policy import Policy
from taugrid.policy.cluster_objects import ObjectName
from taugrid.policy.drift import Drift
from taugrid.ports.policy_target import ApplyReport
from taugrid.server.app import create_app
from taugrid.server.policy_file import (
    APPLIED_BY,
    apply_policy_file,
    needs_apply,
    policy_file_problem,
)
from taugrid.server.queueing import Machine, Queueing
from taugrid.server.settings import ServerSettings
from taugrid.store import connect
from taugrid.store.identity import IdentityStore
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
"""
CQ = ObjectName("ClusterQueue", "shared")


@dataclass
class FakeTarget:
    report: ApplyReport = field(default_factory=lambda: ApplyReport((CQ,)))
    applied: list[Policy] = field(default_factory=list)

    def apply(self, policy: Policy) -> ApplyReport:
        self.applied.append(policy)
        return self.report

    def drift(self, policy: Policy) -> list[Drift]:
        return []


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[PolicyStore, IdentityStore]]:
    db = connect(f"sqlite:///{tmp_path / 'tau.db'}")
    yield PolicyStore(db), IdentityStore(db)
    db.dispose()


def queueing(store: PolicyStore, target: FakeTarget | None = None) -> Queueing:
    return Queueing(store, Machine((), 8000, 1 << 34), lambda: ["a"], policy_target=target)


def test_the_decision_is_the_text() -> None:
    assert needs_apply(POLICY, None)  # the built-in default is no file's
    assert needs_apply(POLICY, POLICY + "# a comment\n")
    assert not needs_apply(POLICY, POLICY)


def test_a_new_file_is_applied_once(
    tmp_path: Path, stores: tuple[PolicyStore, IdentityStore]
) -> None:
    store, identity = stores
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    target = FakeTarget()
    q = queueing(store, target)
    started = apply_policy_file(path, q, identity)
    assert (started.outcome, started.error, started.text) == ("applied", "", POLICY)
    assert len(target.applied) == 1  # the Kueue objects, before it is stored
    row = store.current()
    assert row is not None
    assert (row["source"], row["text"], row["applied_by"]) == (str(path), POLICY, APPLIED_BY)
    assert q.policy.text == POLICY and q.policy.applied_by == "policy-file"
    (entry,) = identity.audit_entries(action="policy.apply")
    assert (entry["actor"], entry["target"], entry["outcome"]) == ("policy-file", str(path), "ok")
    assert entry["detail"] == "applied to the cluster: 1 ClusterQueue"

    # A restart with the same file: nothing recorded, nothing sent to the cluster.
    q2 = queueing(store, target)
    again = apply_policy_file(path, q2, identity)
    assert again.outcome == "unchanged"
    assert len(target.applied) == 1
    assert store.current() == row
    assert len(identity.audit_entries(action="policy.apply")) == 1

    # A changed file is recorded again.
    path.write_text(POLICY.replace("cpu: 64", "cpu: 32"))
    assert apply_policy_file(path, queueing(store, target), identity).outcome == "applied"
    assert len(target.applied) == 2


def test_local_mode_stores_it_for_the_local_scheduler(
    tmp_path: Path, stores: tuple[PolicyStore, IdentityStore]
) -> None:
    store, _ = stores
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    q = queueing(store)
    assert apply_policy_file(path, q).outcome == "applied"
    assert set(q.policy.domain.queues) == {"shared"}


def test_a_refused_apply_keeps_the_policy_in_force(
    tmp_path: Path, stores: tuple[PolicyStore, IdentityStore]
) -> None:
    store, identity = stores
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    refused = ApplyReport((), CQ, "admission webhook denied the request", ())
    q = queueing(store, FakeTarget(report=refused))
    started = apply_policy_file(path, q, identity)
    assert started.outcome == "failed"
    assert started.error.startswith(
        "policy not applied (nothing stored): ClusterQueue shared failed: admission webhook "
        "denied the request"
    )
    assert store.current() is None and q.policy.builtin
    (entry,) = identity.audit_entries(action="policy.apply")
    assert entry["outcome"] == "policy_apply_failed"


def test_a_bad_file_is_one_line_with_its_position(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.replace("cluster_queue: shared", "cluster_queue: nope"))
    problem = policy_file_problem(path)
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"{path}:10:48: workspaces[0].local_queues[0].cluster_queue: ")
    assert "nope" in problem
    two = POLICY.replace("cluster_queue: shared", "cluster_queue: nope").replace(
        "gpu: 0", "gpu: -1"
    )
    path.write_text(two)
    problem = policy_file_problem(path)
    assert problem is not None and "\n" not in problem
    assert problem.endswith(f"(and 1 more: tau admin policy validate {path})")
    assert policy_file_problem(tmp_path / "missing.yaml") == (
        f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory"
    )
    path.write_text(POLICY)
    assert policy_file_problem(path) is None


def test_the_app_applies_it_at_start(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    home = tmp_path / "home"
    settings = ServerSettings.from_env(home, policy_file=path, gpus=0, health="off")
    assert settings.policy_file == path
    app = create_app(settings)
    with TestClient(app) as http:
        token = (home / "token").read_text().strip()
        got = http.get("/api/v1/admin/policy", headers={"Authorization": f"Bearer {token}"})
        assert got.status_code == 200, got.text
        assert got.json()["source"] == str(path)
        assert got.json()["applied_by"] == "policy-file"
        assert app.state.policy_file.outcome == "applied"


def test_the_setting_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAU_POLICY_FILE", "/etc/taugrid/policy.yaml")
    assert ServerSettings.from_env(tmp_path).policy_file == Path("/etc/taugrid/policy.yaml")
    flag = ServerSettings.from_env(tmp_path, policy_file=tmp_path / "p.yaml").policy_file
    assert flag == tmp_path / "p.yaml"  # the flag wins
