"""A real server process started with ``TAU_POLICY_FILE`` (what the Helm chart sets): the
file is in force from the start, applied by ``policy-file``, a restart with the same file
records nothing new, a changed file is applied at the next start, and a bad file stops
the start with its ``file:line:col`` problem on one line (the CLI shows that line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tauproc import Tau, write_spec

pytestmark = pytest.mark.timeout(90)

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
"""


def test_the_server_applies_the_policy_file_at_start(tau: Tau, tmp_path: Path) -> None:
    path = write_spec(tmp_path / "etc", POLICY, "policy.yaml")
    tau("server", "start", "--gpus", "0", TAU_POLICY_FILE=str(path), check=True)
    first = tau.json("admin", "policy", "show")
    assert (first["source"], first["applied_by"], first["builtin"]) == (
        str(path),
        "policy-file",
        False,
    )
    assert [q["name"] for q in tau.json("queues")["queues"]] == ["shared"]  # local scheduler
    tau("server", "stop", check=True)

    tau("server", "start", "--gpus", "0", TAU_POLICY_FILE=str(path), check=True)
    again = tau.json("admin", "policy", "show")
    assert again["applied_at"] == first["applied_at"]  # the same text: nothing recorded
    audit = tau.json("admin", "audit", "--action", "policy.apply")
    assert [e["actor"] for e in audit["entries"]] == ["policy-file"]
    tau("server", "stop", check=True)

    path.write_text(POLICY.replace("cpu: 8", "cpu: 4"))
    tau("server", "start", "--gpus", "0", TAU_POLICY_FILE=str(path), check=True)
    changed = tau.json("admin", "policy", "show")
    assert changed["hash"] != first["hash"] and changed["applied_at"] > first["applied_at"]
    tau("server", "stop", check=True)


def test_a_bad_policy_file_stops_the_start_in_one_line(tau: Tau, tmp_path: Path) -> None:
    path = write_spec(
        tmp_path, POLICY.replace("cluster_queue: shared", "cluster_queue: x"), "policy.yaml"
    )
    env = tau.env(TAU_POLICY_FILE=str(path))
    proc = subprocess.run(
        [sys.executable, "-m", "taugrid.server", "--home", str(tau.home), "--gpus", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"policy file: {path}:10:51: workspaces[0].local_queues[0].cluster_queue: unknown "
        "cluster queue 'x' (cluster_queues: shared)\n"
    )
    assert not (tau.home / "server.json").exists()

    started = tau("server", "start", "--gpus", "0", TAU_POLICY_FILE=str(path))
    assert started.returncode != 0
    assert f"policy file: {path}:10:51:" in started.stderr
    assert "Traceback" not in started.stderr
