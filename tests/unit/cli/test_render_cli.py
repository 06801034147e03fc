"""``tau render``: the real CLI prints, with no server, exactly what a cluster run
creates, and refuses what a cluster cannot run with one line and nothing printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from k8s_validate import SCHEMAS, require_schemas, validate_object
from taugrid.workdir.snapshot import create_snapshot

POLICY = """\
flavors:
  - {name: h100, gpu_type: h100, gpus_per_node: 8, node_labels: {gpu: h100}}
  - {name: cpu, node_labels: {pool: cpu}}
cluster_queues:
  - name: research
    resources:
      - {flavor: h100, quotas: {gpu: 16, cpu: 128, memory: 1Ti}}
      - {flavor: cpu, quotas: {gpu: 0, cpu: 64, memory: 256Gi}}
workspaces:
  - name: vision
    local_queues: [{name: default, cluster_queue: research}]
    storage: {pvc: vision-runs}
"""

SPEC = """\
name: train
workspace: vision
image: ghcr.io/acme/train:1.4
command: [python, train.py]
resources: {gpus: 8, gpu_type: h100}
"""


def tau(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TAU_HOME": str(cwd / "home"), "TAU_CONFIG": str(cwd / "config.yaml")}
    env.pop("TAU_SERVER_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "taugrid.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def project(tmp_path: Path, spec: str = SPEC) -> Path:
    work = tmp_path / "proj"
    work.mkdir()
    (work / "tau.yaml").write_text(spec)
    (work / "train.py").write_text("print('hi')\n")
    (tmp_path / "policy.yaml").write_text(POLICY)
    return work


def test_render_prints_valid_objects_with_the_real_snapshot_digest(tmp_path: Path) -> None:
    require_schemas()
    work = project(tmp_path)
    out = tau(work, "render", "--policy", str(tmp_path / "policy.yaml"), "--namespace-prefix", "t-")
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert [d["kind"] for d in docs] == ["Secret", "Job"]
    for doc in docs:
        assert validate_object(doc, (SCHEMAS / "kuberay",)) == []
    job = docs[1]
    assert job["metadata"]["namespace"] == "t-vision"
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["initContainers"][0]["env"]}
    # The digest a server would store for this workdir: the same archive, hashed.
    expected = create_snapshot(work, [], tmp_path / "snapshots").digest
    assert env["TAU_SNAPSHOT_SHA256"] == expected
    assert {"name": "run-data", "persistentVolumeClaim": {"claimName": "vision-runs"}} in pod[
        "volumes"
    ]
    assert not (work / "home").exists()  # no local server was started


def test_what_the_cluster_would_refuse_is_one_line_and_nothing_printed(tmp_path: Path) -> None:
    work = project(tmp_path)
    policy = str(tmp_path / "policy.yaml")
    too_big = tau(work, "render", "--policy", policy, "--set", "resources.gpus=16")
    assert too_big.returncode == 2 and too_big.stdout == ""
    assert too_big.stderr.startswith("tau: run asks for 16 GPUs per node but the largest node")
    assert len(too_big.stderr.strip().splitlines()) == 1
    nobody = tau(work, "render", "--policy", policy, "--workspace", "audio")
    assert nobody.returncode == 2 and "workspace 'audio' is not in the policy" in nobody.stderr


def test_a_bad_spec_is_reported_at_its_position(tmp_path: Path) -> None:
    work = project(tmp_path, SPEC.replace("gpus: 8", "gpus: eight"))
    out = tau(work, "render")
    assert out.returncode == 2 and out.stdout == ""
    assert "tau.yaml:5:" in out.stderr and "resources.gpus" in out.stderr


def test_without_a_policy_the_built_in_one_renders_the_default_queue(tmp_path: Path) -> None:
    work = project(tmp_path, SPEC.replace("resources: {gpus: 8, gpu_type: h100}\n", ""))
    out = tau(work, "render")
    assert out.returncode == 0, out.stderr
    job = list(yaml.safe_load_all(out.stdout))[-1]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert job["metadata"]["namespace"] == "vision"
