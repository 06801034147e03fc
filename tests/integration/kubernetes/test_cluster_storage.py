"""A cluster server whose workspace keeps runs' files in object storage (a real S3 API:
moto on loopback): the policy applied to the cluster, and a preempted run's next attempt
resuming from the checkpoint the server chose and verified in the bucket."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tauproc import Tau

from kube_emulator import KubeEmulator
from kueue_player import KueuePlayer, wait_for
from s3server import KEY_ID, SECRET, S3Server, s3  # noqa: F401  (s3: the fixture)
from taugrid.sdk.checkpoint import saving

POLICY = """\
flavors:
  - name: cpu
cluster_queues:
  - name: cq
    resources:
      - flavor: cpu
        quotas: {{gpu: 0, cpu: 64, memory: 256Gi}}
workspaces:
  - name: default
    local_queues: [{{name: main, cluster_queue: cq}}]
    storage:
      url: s3://{bucket}/runs-of/default
      endpoint_url: {endpoint}
      credentials_secret: bucket-keys
"""

SPEC = """\
name: resumable
image: python:3.12-slim
command: python train.py
resources: {cpus: 1, memory: 1Gi}
"""


@pytest.fixture
def cluster(
    tau: Tau,
    kube_emulator: KubeEmulator,
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
) -> Iterator[tuple[KueuePlayer, str]]:
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    kube_emulator.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "bucket-keys", "namespace": "default"},
            "data": {
                "AWS_ACCESS_KEY_ID": base64.b64encode(KEY_ID.encode()).decode(),
                "AWS_SECRET_ACCESS_KEY": base64.b64encode(SECRET.encode()).decode(),
            },
        }
    )
    tau.start_server("--executor", "kubernetes", "--kubeconfig", str(config))
    bucket = s3.bucket()
    (tmp_path / "policy.yaml").write_text(POLICY.format(bucket=bucket, endpoint=s3.endpoint))
    applied = tau("admin", "policy", "apply", str(tmp_path / "policy.yaml"), check=True)
    assert "ClusterQueue" in applied.stdout, applied.stdout
    yield KueuePlayer(kube_emulator), bucket
    tau("server", "stop", timeout=30)


def upload_checkpoints(s3: S3Server, bucket: str, run_id: str, tmp: Path) -> None:  # noqa: F811
    """Steps 2 and 3 as the pod's sidecar leaves them; step 3 then corrupted."""
    root = tmp / "ckpt"
    for step in (2, 3):
        with saving(step, root=root) as d:
            (d / "w.bin").write_bytes(os.urandom(2048))
        time.sleep(0.01)
    fs = s3.fs()
    prefix = f"{bucket}/runs-of/default/runs/{run_id}/checkpoints"
    for path in sorted(root.rglob("*")):
        if path.is_file():
            fs.pipe_file(f"{prefix}/{path.relative_to(root)}", path.read_bytes())
    key = f"{prefix}/step-0000000003/w.bin"
    raw = bytearray(fs.cat_file(key))
    raw[10] ^= 0xFF
    fs.pipe_file(key, bytes(raw))


def test_the_policy_lands_on_the_cluster_and_a_preempted_run_resumes_from_the_bucket(
    tau: Tau,
    cluster: tuple[KueuePlayer, str],
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
) -> None:
    player, bucket = cluster
    # tau admin policy apply server-side applied Kueue's objects.
    assert player.emu.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", None, "cq") is not None
    assert player.emu.get("kueue.x-k8s.io/v1beta2", "LocalQueue", "default", "main") is not None
    (tau.cwd / "tau.yaml").write_text(SPEC)
    (tau.cwd / "train.py").write_text("print('train')\n")
    run_id = str(tau.json("run")["run"]["id"])
    job = player.wait_job(run_id)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "main"
    player.make_workload(job)
    wait_for(
        "Kueue's reason in tau queues",
        lambda: "insufficient unused quota" in tau("queues", check=True).stdout,
    )
    queues = tau("queues", check=True).stdout
    assert "waiting in cq:" in queues and run_id in queues, queues
    player.admit(job)
    (pod,) = player.make_pods(player.wait_job(run_id))
    player.pod_running(pod)
    tau.wait_state(run_id, {"RUNNING"})
    upload_checkpoints(s3, bucket, run_id, tmp_path)
    player.evict(job)
    job1 = player.wait_job(run_id, 1)
    pod_spec = job1["spec"]["template"]["spec"]
    fetch = next(c for c in pod_spec["initContainers"] if c["name"] == "fetch-resume")
    env = {e["name"]: e.get("value") for e in fetch["env"]}
    assert env["TAU_RESUME_STEP"] == "step-0000000002"  # step 3 does not verify
    main = {e["name"]: e.get("value") for e in pod_spec["containers"][0]["env"]}
    assert main["TAU_RESUME_FROM"] == "/tau/run/checkpoints/step-0000000002"
    # Credentials reach the pod by reference only.
    assert SECRET not in str(job1) and KEY_ID not in str(job1)
    said = [e["message"] for e in tau.json("status", run_id)["events"]]
    assert any("step 3 skipped" in m and "sha256" in m for m in said), said
    detail = tau.json("status", run_id)
    steps = [c["step"] for c in detail.get("checkpoints") or []]
    assert steps == [3, 2], detail.get("checkpoints")
    wait_for("attempt 0 deleted", lambda: player.job(f"{run_id}-a0") is None)
