"""What only the pod sees, told to the server by the attempt's reporting sidecar (the real
``python -m taugrid.podhelper report``, started by the test playing the kubelet): a
cluster run's metrics reach ``tau metrics`` and ``tau status``, and the checkpoints on a
workspace's PVC, verified in the pod, give the next attempt its resume point."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tauproc import Tau

from kube_emulator import KubeEmulator
from kueue_player import KueuePlayer, wait_for
from taugrid.sdk.checkpoint import saving

POLICY = """\
flavors:
  - name: cpu
cluster_queues:
  - name: cq
    resources:
      - flavor: cpu
        quotas: {gpu: 0, cpu: 64, memory: 256Gi}
workspaces:
  - name: default
    local_queues: [{name: main, cluster_queue: cq}]
    storage:
      pvc: team-runs
"""

SPEC = """\
name: trains
image: python:3.12-slim
command: python train.py
resources: {cpus: 1, memory: 1Gi}
restart: {max: 2}
"""


@pytest.fixture
def cluster(tau: Tau, kube_emulator: KubeEmulator, tmp_path: Path) -> Iterator[KueuePlayer]:
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    tau.start_server("--executor", "kubernetes", "--kubeconfig", str(config))
    (tmp_path / "policy.yaml").write_text(POLICY)
    tau("admin", "policy", "apply", str(tmp_path / "policy.yaml"), check=True)
    yield KueuePlayer(kube_emulator)
    tau("server", "stop", timeout=30)


def running(tau: Tau, cluster: KueuePlayer, run_id: str, attempt: int) -> Any:
    job = cluster.wait_job(run_id, attempt)
    cluster.make_workload(job)
    cluster.admit(job)
    (pod,) = cluster.make_pods(cluster.wait_job(run_id, attempt))
    cluster.pod_running(pod)
    tau.wait_state(run_id, {"RUNNING"})
    return job, pod


def log_metrics(path: Path, *steps: int) -> None:
    """What ``taugrid.log`` appends, one line per step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for step in steps:
            f.write(
                f'{{"step": {step}, "time": {time.time()}, "values": {{"loss": {1 / step}}}}}\n'
            )


def reporter(
    cluster: KueuePlayer, tau: Tau, pod: Any, volume: Path, **env: str
) -> subprocess.Popen[str]:
    return cluster.run_helper(
        pod,
        "report",
        volumes={"/tau/run": volume},
        server_url=tau.server_info()["url"],
        env={"TAU_REPORT_INTERVAL": "0.1", **env},
    )


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, as the kubelet stops a sidecar once the workload is done."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return out


def metric_steps(tau: Tau, run_id: str, attempt: int) -> list[int]:
    doc = tau.json("metrics", run_id, "--attempt", str(attempt))
    return [point["step"] for point in doc["series"]]


def test_metrics_and_pvc_checkpoints_reach_the_server_and_choose_the_resume_point(
    tau: Tau, cluster: KueuePlayer, tmp_path: Path
) -> None:
    (tau.cwd / "tau.yaml").write_text(SPEC)
    (tau.cwd / "train.py").write_text("print('train')\n")
    run_id = str(tau.json("run")["run"]["id"])
    job, pod = running(tau, cluster, run_id, 0)
    # The PVC's directory for this run, as the workload left it: three metric lines,
    # checkpoints 2 and 3, and step 3's weights damaged after its commit (same size).
    volume = tmp_path / "pvc" / "runs" / run_id
    metrics0 = volume / "attempts" / "0" / "metrics.jsonl"
    log_metrics(metrics0, 1, 2, 3)
    for step in (2, 3):
        with saving(step, root=volume / "checkpoints") as d:
            (d / "w.bin").write_bytes(bytes(range(256)) * 8)
        time.sleep(0.01)
    weights = volume / "checkpoints" / "step-0000000003" / "w.bin"
    raw = bytearray(weights.read_bytes())
    raw[10] ^= 0xFF
    weights.write_bytes(bytes(raw))

    token0 = secret_value(cluster, job, "report")
    proc = reporter(cluster, tau, pod, volume)
    status = wait_for(
        "the pod's metrics in tau status",
        lambda: (
            (s := tau.json("status", run_id))
            and (s.get("metrics_last") or {}).get("step") == 3
            and s
        ),
    )
    assert status["metrics_last"]["values"]["loss"] == pytest.approx(1 / 3)
    assert "progressing: step 3" in (status.get("progress") or ""), status.get("progress")
    assert metric_steps(tau, run_id, 0) == [1, 2, 3]
    checkpoints = wait_for(
        "the PVC's checkpoints as the pod verified them",
        lambda: tau.json("status", run_id).get("checkpoints"),
    )
    assert [c["step"] for c in checkpoints] == [3, 2]
    by_step = {c["step"]: c for c in checkpoints}
    assert "sha256" in (by_step[3].get("problem") or ""), by_step[3]
    assert by_step[2]["verified"] is True and by_step[2]["name"] == "step-0000000002"

    # The server loses its copy (a crash before it reached the disk): the next lines
    # arrive, and the lost ones are sent again, each once.
    copy = tau.home / "kubernetes" / "reports" / run_id / "attempts" / "0" / "metrics.jsonl"
    copy.unlink()
    log_metrics(metrics0, 4)
    wait_for("the metrics sent again", lambda: metric_steps(tau, run_id, 0) == [1, 2, 3, 4])

    # Kueue preempts; the kubelet stops the sidecar, whose last pass sends the last line.
    log_metrics(metrics0, 5)
    cluster.evict(job)
    out = stop(proc)
    assert "tau-report." not in out  # the token is never printed
    assert metric_steps(tau, run_id, 0) == [1, 2, 3, 4, 5]
    job1 = cluster.wait_job(run_id, 1)
    main = {
        e["name"]: e.get("value") for e in job1["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert main["TAU_RESUME_FROM"] == "/tau/run/checkpoints/step-0000000002"  # 3 is damaged
    said = [e["message"] for e in tau.json("status", run_id)["events"]]
    assert any("step 3 skipped" in m and "sha256" in m for m in said), said

    # Attempt 1's sidecar reports for attempt 1 only; attempt 0's token opens nothing else.
    _, pod1 = running(tau, cluster, run_id, 1)
    url = tau.server_info()["url"]
    late = httpx.post(
        f"{url}/api/v1/runs/{run_id}/attempts/1/metrics?offset=0",
        content=b'{"step": 99, "time": 0, "values": {}}\n',
        headers={"Authorization": f"Bearer {token0}"},
    )
    assert late.status_code == 401
    for other in (
        httpx.get(f"{url}/api/v1/runs", headers={"Authorization": f"Bearer {token0}"}),
        httpx.post(
            f"{url}/api/v1/runs/{run_id}/attempts/0/metrics?offset=0",
            content=b"",
            headers={"Authorization": f"Bearer {tau.token()}"},  # a user's token: no
        ),
    ):
        assert other.status_code == 401
    log_metrics(volume / "attempts" / "1" / "metrics.jsonl", 6)
    proc1 = reporter(cluster, tau, pod1, volume)
    wait_for("attempt 1's metrics", lambda: metric_steps(tau, run_id, 1) == [6])
    stop(proc1)
    assert metric_steps(tau, run_id, 0) == [1, 2, 3, 4, 5]


def secret_value(cluster: KueuePlayer, job: Any, key: str) -> str:
    name = f"{job['metadata']['name']}-code"
    secret = cluster.emu.get("v1", "Secret", job["metadata"]["namespace"], name)
    assert secret is not None
    return str(secret["stringData"][key])


def test_another_ranks_sidecar_waits_and_a_refused_token_is_said_once(
    tau: Tau, cluster: KueuePlayer, tmp_path: Path
) -> None:
    (tau.cwd / "tau.yaml").write_text(SPEC)
    (tau.cwd / "train.py").write_text("print('train')\n")
    run_id = str(tau.json("run")["run"]["id"])
    _, pod = running(tau, cluster, run_id, 0)
    volume = tmp_path / "vol"
    log_metrics(volume / "attempts" / "0" / "metrics.jsonl", 1)
    # Rank 1's pod of an Indexed Job: it sends nothing and exits when stopped.
    rank1 = reporter(cluster, tau, pod, volume, JOB_COMPLETION_INDEX="1")
    time.sleep(1.0)
    assert rank1.poll() is None  # a native sidecar that exits would be restarted
    stop(rank1)
    assert metric_steps(tau, run_id, 0) == []
    # A token that is not the attempt's: refused, said once, and the sidecar carries on.
    forged = reporter(cluster, tau, pod, volume, TAU_REPORT_TOKEN="tau-report.x.y")
    time.sleep(1.0)
    assert forged.poll() is None
    out = stop(forged)
    assert out.count("refused the metrics (401") == 1, out
    assert metric_steps(tau, run_id, 0) == []
