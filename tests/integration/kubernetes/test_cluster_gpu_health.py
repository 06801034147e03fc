"""GPU health on a real ``tau server --executor kubernetes`` against the emulator, with the
test playing Kueue, the kubelet and the node's agent (its reports over HTTP): an Xid 79
on the node of a running run cordons and taints the node, the run's pod leaves through
the Eviction API (a disruption budget's 429 first), the run restarts as a hardware fault
as a new attempt, ``tau gpus`` shows the node, and a person's return uncordons it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tauproc import Tau

from kube_emulator import KubeEmulator
from kueue_player import KueuePlayer, wait_for
from recording import gpu_node as node
from taugrid.executors.kubernetes.node_health import CORDONED_BY, TAINT_KEY

pytestmark = pytest.mark.timeout(90)

SPEC = """\
name: {name}
image: python:3.12-slim
command: python train.py
resources:
  cpus: 1
  memory: 1Gi
restart:
  max: 0
"""


@pytest.fixture
def cluster(tau: Tau, kube_emulator: KubeEmulator, tmp_path: Path) -> Iterator[KueuePlayer]:
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    for i in range(1, 6):
        kube_emulator.put(node(f"gpu-{i}"))
    player = KueuePlayer(kube_emulator)
    tau.start_server("--executor", "kubernetes", "--kubeconfig", str(config))
    yield player
    tau("server", "stop", timeout=30)


def post(tau: Tau, path: str, body: dict[str, Any], token: str | None = None) -> Any:
    url = tau.server_info()["url"] + "/api/v1" + path
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token or tau.token()}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:  # it holds the connection
            return exc.code, json.loads(exc.read())


def test_an_xid_79_report_cordons_the_node_evicts_the_pod_and_restarts_the_run(
    tau: Tau, cluster: KueuePlayer, kube_emulator: KubeEmulator
) -> None:
    (tau.cwd / "tau.yaml").write_text(SPEC.format(name="train"))
    (tau.cwd / "train.py").write_text("print('hello')\n")
    run_id = str(tau.json("run")["run"]["id"])
    job = cluster.wait_job(run_id)
    cluster.make_workload(job)
    cluster.admit(job)
    job = cluster.wait_job(run_id)
    (pod,) = cluster.make_pods(job, node="gpu-1")
    # The pods the test makes ask for no GPU: the kubelet's view says this one has one.
    pod["spec"]["containers"][0].setdefault("resources", {}).setdefault("limits", {})[
        "nvidia.com/gpu"
    ] = "1"
    kube_emulator.put(pod)
    cluster.pod_running(pod)
    tau.wait_state(run_id, {"RUNNING"})
    pod_name = pod["metadata"]["name"]
    kube_emulator.fail_next(rf"/api/v1/namespaces/[^/]+/pods/{pod_name}/eviction", 429)

    # A malformed observation is refused with where it is, and nothing is done.
    code, body = post(tau, "/health/reports", {"node": "gpu-1", "observations": [{"kind": 1}]})
    assert code == 422 and "observations[0]" in body["error"]["message"]

    fault_at = time.time()
    obs = {"kind": "xid", "gpu_uuid": "GPU-0", "at": fault_at, "xid": 79, "source": "kmsg"}
    gpus = [{"index": 0, "uuid": "GPU-0", "name": "H100"}]
    code, standing = post(
        tau, "/health/reports", {"node": "gpu-1", "observations": [obs], "gpus": gpus}
    )
    assert code == 200, standing
    assert standing["healthy"] is False and standing["level"] == 3

    got = kube_emulator.get("v1", "Node", None, "gpu-1")
    assert got is not None and got["spec"]["unschedulable"] is True
    assert got["metadata"]["annotations"][CORDONED_BY] == "taugrid"
    assert any(t["key"] == TAINT_KEY for t in got["spec"]["taints"])
    # The stop evicts the attempt's pod through the Eviction API (after the budget's 429,
    # retried 10 s later), then the attempt's Job goes and the run is queued again.
    wait_for(
        "the pod evicted",
        lambda: (job["metadata"]["namespace"], pod_name) in kube_emulator.evictions(),
        timeout=30,
    )
    tries = [r for r in kube_emulator.requests() if r.path.endswith(f"/{pod_name}/eviction")]
    assert len(tries) == 2  # refused once, then accepted
    wait_for("attempt 0's Job deleted", lambda: cluster.job(f"{run_id}-a0") is None)
    cluster.collect_garbage()
    job1 = cluster.wait_job(run_id, 1)
    assert job1["spec"]["suspend"] is True
    status = tau.json("status", run_id)
    said = " ".join(f"{e['reason']}: {e['message']}" for e in status["events"])
    assert "Xid 79" in said and "gpu-1" in said, said
    assert status["restarts"] == 0  # a hardware fault is never the user's restart

    shown = tau.json("gpus")
    (n1,) = [n for n in shown["nodes"] if n["node"] == "gpu-1"]
    assert n1["health"] == "unhealthy" and n1["cordoned_by_taugrid"] is True
    assert {n["node"]: n["health"] for n in shown["nodes"]}["gpu-2"] == "unknown"
    table = tau("gpus", check=True).stdout
    assert "gpu-1" in table and "UNHEALTHY" in table and "by TauGrid" in table
    events = tau.json("admin", "health", "events")["events"]
    assert events[0]["xid"] == 79 and events[0]["runs"] == [run_id]

    tau("admin", "health", "return", "gpu-1", check=True)
    back = kube_emulator.get("v1", "Node", None, "gpu-1")
    assert back is not None and not back["spec"].get("unschedulable")
    proc = tau("admin", "health", "return", "gpu-1")
    assert proc.returncode != 0 and "not out of service" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_agents_token_sends_reports_and_reaches_nothing_else(
    tau: Tau, kube_emulator: KubeEmulator, tmp_path: Path
) -> None:
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    kube_emulator.put(node("gpu-1"))
    tau.start_server("--shared", "--executor", "kubernetes", "--kubeconfig", str(config))
    try:
        admin = (tau.home / "admin-token").read_text().strip()
        code, made = post(tau, "/admin/users", {"name": "agents", "kind": "agent"}, admin)
        assert code in (200, 201), made
        code, refused = post(
            tau, "/admin/users", {"name": "bad", "kind": "agent", "admin": True}, admin
        )
        assert code == 400 and "cannot be an admin" in refused["error"]["message"]
        code, tok = post(tau, "/admin/tokens", {"user": "agents"}, admin)
        agent = tok["token"]
        obs = {"kind": "xid", "gpu_uuid": "GPU-0", "at": time.time(), "xid": 13}
        code, standing = post(
            tau, "/health/reports", {"node": "gpu-1", "observations": [obs]}, agent
        )
        assert code == 200 and standing["healthy"] is True  # Xid 13: the job's own error
        for path in ("/runs/cancel", "/admin/users", "/admin/health/return"):
            code, body = post(tau, path, {"runs": [], "name": "x", "node": "gpu-1"}, agent)
            assert code == 403, (path, code, body)
            assert "health reports" in body["error"]["message"]
        # The agent itself, on a drill's replay file: its report cordons the node.
        token_file = tmp_path / "agent-token"
        token_file.write_text(agent + "\n")
        drill = tmp_path / "drill.jsonl"
        line = {"kind": "xid", "gpu_uuid": "GPU-0", "at": time.time(), "xid": 79}
        drill.write_text(json.dumps(line) + "\n")
        server = tau.server_info()["url"]
        argv = ["--server", server, "--token-file", str(token_file), "--node", "gpu-1"]
        proc = tau("health", "agent", *argv, "--replay", str(drill), "--no-nvml", "--once")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["healthy"] is False
        got = kube_emulator.get("v1", "Node", None, "gpu-1")
        assert got is not None and got["spec"]["unschedulable"] is True
        (cond,) = [c for c in got["status"].get("conditions") or [] if c["type"] == "GPUHealthy"]
        assert cond["status"] == "False" and cond["reason"] == "GPUFaultL3"
        # A token the server does not know: refused in one line, not retried forever.
        token_file.write_text("tau_not_a_token\n")
        proc = tau("health", "agent", *argv, "--no-nvml", "--once")
        assert proc.returncode == 2 and "refused the report (401)" in proc.stderr
        assert "Traceback" not in proc.stderr

        url = tau.server_info()["url"] + "/api/v1/runs"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {agent}"})
        with pytest.raises(urllib.error.HTTPError) as got:
            urllib.request.urlopen(req, timeout=10)
        got.value.close()
        assert got.value.code == 403
    finally:
        tau("server", "stop", timeout=30)
