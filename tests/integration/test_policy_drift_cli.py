"""`tau admin policy apply` and `tau admin policy drift` through the real CLI and a local
server: without a cluster the apply prints what it always did and drift says there is
no cluster to compare with."""

from __future__ import annotations

from pathlib import Path

from tauproc import Tau, write_spec

POLICY = """\
flavors:
  - name: cpu
cluster_queues:
  - name: shared
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 8, memory: 8Gi}
workspaces:
  - name: default
    local_queues: [{name: default, cluster_queue: shared}]
priority_classes:
  - {name: normal, value: 1000, default: true}
"""


def test_local_mode_apply_and_drift(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "0")
    policy = write_spec(tmp_path, POLICY, "policy.yaml")
    out = tau("admin", "policy", "apply", str(policy), check=True).stdout
    assert out.splitlines() == [
        f"policy from {policy} in force (hash {out.split('hash ')[1][:12]}): "
        "1 cluster queue(s), 1 local queue(s)"
    ]
    assert tau.json("admin", "policy", "apply", str(policy))["cluster"] is None
    drift = tau("admin", "policy", "drift", check=True).stdout
    assert (
        drift == "no cluster: this server runs in local mode (the policy is in force here only)\n"
    )
    assert tau.json("admin", "policy", "drift") == {
        "cluster": False,
        "source": str(policy),
        "hash": tau.json("admin", "policy", "show")["hash"],
        "drift": [],
    }
