"""Queues, quotas, priorities and preemption through the real CLI and server."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tauproc import Tau, write_spec

PY = sys.executable

# Two teams share a cohort; team-b may borrow. Priorities low < normal < high.
POLICY = """\
flavors:
  - name: gpu
cohorts:
  - name: research
cluster_queues:
  - name: team-a
    cohort: research
    preemption: {within_cluster_queue: LowerPriority, reclaim_within_cohort: Any}
    resources:
      - flavor: gpu
        quotas: {gpu: 2, cpu: 8, memory: 8Gi}
  - name: team-b
    cohort: research
    resources:
      - flavor: gpu
        quotas: {gpu: {nominal: 2, borrowing_limit: 2}, cpu: 8, memory: 8Gi}
workspaces:
  - name: a
    local_queues: [{name: main, cluster_queue: team-a}]
  - name: b
    local_queues: [{name: main, cluster_queue: team-b}]
    user_limits: {max_running_runs: 3}
priority_classes:
  - {name: low, value: 100}
  - {name: normal, value: 1000, default: true}
  - {name: high, value: 10000}
"""


def _gpu_job(tmp_path: Path, name: str) -> str:
    """A workload that records its GPUs and attempt, then waits for a gate file."""
    gate = tmp_path / f"{name}.gate"
    return (
        "import os, pathlib, signal, sys, time\n"
        f"out = pathlib.Path({str(tmp_path)!r}) / ('{name}-' + os.environ['TAU_ATTEMPT'])\n"
        "out.write_text(os.environ['CUDA_VISIBLE_DEVICES'])\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
    )


def _submit(tau: Tau, tmp_path: Path, name: str, *args: str) -> str:
    run = tau.json(
        "run",
        "--name",
        name,
        *args,
        "--set",
        "stop_grace=2s",
        "--",
        PY,
        "-c",
        _gpu_job(tmp_path, name),
    )
    return str(run["run"]["id"])


def test_gpu_placement_queueing_and_preemption(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "2")
    first = _submit(tau, tmp_path, "first", "--gpus", "2")
    tau.wait_state(first, {"RUNNING"})
    assert sorted((tmp_path / "first-0").read_text().split(",")) == ["0", "1"]

    # Equal priority never preempts under the default policy: the second run waits.
    second = _submit(tau, tmp_path, "second", "--gpus", "1")
    time.sleep(0.5)
    waiting = tau.json("status", second)
    assert waiting["state"] == "QUEUED"
    assert waiting["pending"]["reason"] == "WaitingForQuota"
    assert "2 of 2 in use" in waiting["pending"]["message"]
    assert "#1 in default: WaitingForQuota" in tau("status", check=True).stdout
    assert "Waiting:    #1 in cluster queue default" in tau("status", second, check=True).stdout

    # A high-priority run preempts the running one: SIGTERM, grace, back in the queue.
    high = _submit(tau, tmp_path, "high", "--gpus", "2", "--priority", "high")
    tau.wait_state(high, {"RUNNING"})
    victim = tau.json("status", first)
    assert victim["state"] == "QUEUED"
    trail = [(e["to_state"], e["reason"]) for e in victim["events"]]
    assert trail[-2:] == [("PREEMPTED", "Preempted"), ("QUEUED", "Queued")]
    assert victim["attempt_list"][0]["outcome"] == "preempted"
    assert high in next(e["message"] for e in victim["events"] if e["reason"] == "Preempted")
    assert tau.json("status", second)["state"] == "QUEUED"

    (q,) = tau.json("queues")["queues"]
    assert (q["used"]["local"]["gpu"], q["pending"], q["running"]) == (2, 2, 1)

    (tmp_path / "high.gate").write_text("go")
    tau.wait_state(high, {"SUCCEEDED"})
    # FIFO among equals: the preempted run keeps its place ahead of the later one.
    again = tau.wait_state(first, {"RUNNING"})
    assert again["attempts"] == 2 and (tmp_path / "first-1").exists()  # TAU_ATTEMPT=1
    assert tau.json("status", second)["state"] == "QUEUED"
    (tmp_path / "first.gate").write_text("go")
    tau.wait_state(second, {"RUNNING"})
    (tmp_path / "second.gate").write_text("go")
    assert tau.wait_state(second, {"SUCCEEDED"})["state"] == "SUCCEEDED"


def test_policy_apply_validate_show_and_borrowing(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "4")
    bad = write_spec(
        tmp_path, POLICY.replace("cluster_queue: team-b", "cluster_queue: nope"), "bad.yaml"
    )
    proc = tau("admin", "policy", "apply", str(bad))
    assert proc.returncode == 2 and f"{bad}:" in proc.stderr and "nope" in proc.stderr
    assert tau.json("admin", "policy", "show")["builtin"] is True  # old policy still in force

    good = write_spec(tmp_path, POLICY, "policy.yaml")
    applied = tau.json("admin", "policy", "apply", str(good))
    assert applied["cluster_queues"] == ["team-a", "team-b"]
    assert tau("admin", "policy", "show", check=True).stdout.endswith(POLICY)

    rejected = tau("run", "--set", "workspace=b", "--queue", "other", "--", "true")
    assert rejected.returncode == 2 and "queues: main" in rejected.stderr
    too_big = tau("run", "--set", "workspace=b", "--queue", "main", "--gpus", "5", "--", "true")
    assert too_big.returncode == 8 and "can never" in too_big.stderr

    # team-b borrows team-a's idle GPUs (up to its borrowing limit of 2)
    ids = [
        _submit(tau, tmp_path, f"b{i}", "--set", "workspace=b", "--queue", "main", "--gpus", "2")
        for i in range(2)
    ]
    for rid in ids:
        tau.wait_state(rid, {"RUNNING"})
    q = {x["name"]: x for x in tau.json("queues")["queues"]}
    assert q["team-b"]["used"]["gpu"]["gpu"] == 4 and q["team-b"]["borrowed"]["gpu"]["gpu"] == 2

    # a third run hits the user limit? no: max_running_runs is 3; it waits for quota
    third = _submit(tau, tmp_path, "b2", "--set", "workspace=b", "--queue", "main", "--gpus", "1")
    time.sleep(0.5)
    pend = tau.json("status", third)["pending"]
    assert pend["reason"] == "WaitingForQuota" and "borrow" in pend["message"]

    # team-a reclaims its lent quota: a team-b run is preempted
    a_run = _submit(tau, tmp_path, "a0", "--set", "workspace=a", "--queue", "main", "--gpus", "2")
    tau.wait_state(a_run, {"RUNNING"}, timeout=30)
    states = {rid: tau.json("status", rid) for rid in ids}
    preempted = [r for r in states.values() if any(e["reason"] == "Preempted" for e in r["events"])]
    assert len(preempted) == 1
    for name in ("a0", "b0", "b1", "b2"):
        (tmp_path / f"{name}.gate").write_text("go")


def test_queue_order_and_preempted_runs_survive_a_restart(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "1")
    holder = _submit(tau, tmp_path, "holder", "--gpus", "1")
    tau.wait_state(holder, {"RUNNING"})
    waiting = [_submit(tau, tmp_path, f"w{i}", "--gpus", "1") for i in range(3)]
    time.sleep(0.5)
    before = [tau.json("status", w)["pending"]["position"] for w in waiting]
    assert before == [1, 2, 3]
    tau.kill_server()
    tau.start_server("--gpus", "1")
    time.sleep(0.5)
    after = [tau.json("status", w)["pending"]["position"] for w in waiting]
    assert after == before
    assert tau.json("status", holder)["state"] == "RUNNING"
    (tmp_path / "holder.gate").write_text("go")
    tau.wait_state(waiting[0], {"RUNNING"})
    assert tau.json("status", waiting[1])["state"] == "QUEUED"
    for i in range(3):
        (tmp_path / f"w{i}.gate").write_text("go")


def test_user_limits_and_unknown_priority(tau: Tau, tmp_path: Path) -> None:
    tau.start_server("--gpus", "4")
    policy = write_spec(
        tmp_path, POLICY.replace("max_running_runs: 3", "max_running_runs: 1"), "policy.yaml"
    )
    tau("admin", "policy", "apply", str(policy), check=True)
    bad = tau(
        "run", "--set", "workspace=b", "--queue", "main", "--priority", "urgent", "--", "true"
    )
    assert bad.returncode == 2 and "priorities: low, normal, high" in bad.stderr
    first = _submit(tau, tmp_path, "u0", "--set", "workspace=b", "--queue", "main")
    tau.wait_state(first, {"RUNNING"})
    second = _submit(tau, tmp_path, "u1", "--set", "workspace=b", "--queue", "main")
    time.sleep(0.5)
    pend = tau.json("status", second)["pending"]
    assert pend["reason"] == "UserLimit", pend
    (tmp_path / "u0.gate").write_text("go")
    tau.wait_state(second, {"RUNNING"})
    (tmp_path / "u1.gate").write_text("go")
