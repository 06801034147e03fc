"""A real ``tau server --executor kubernetes`` against the emulator, with the test playing
Kueue, the Job controller and the kubelet (tests/kueue_player.py): what a researcher's
commands show at each step, and what the cluster holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kueue_player import KueuePlayer, wait_for
from tauproc import Tau

from kube_emulator import KubeEmulator

SPEC = """\
name: {name}
image: python:3.12-slim
command: python train.py
resources:
  cpus: 1
  memory: 1Gi
restart:
  max: 2
"""


@pytest.fixture
def cluster(tau: Tau, kube_emulator: KubeEmulator, tmp_path: Path) -> Iterator[KueuePlayer]:
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    tau.start_server("--executor", "kubernetes", "--kubeconfig", str(config))
    yield KueuePlayer(kube_emulator)
    tau("server", "stop", timeout=30)  # before the emulator: its watches end first


def submit(tau: Tau, name: str, spec: str = SPEC) -> str:
    (tau.cwd / "tau.yaml").write_text(spec.format(name=name))
    (tau.cwd / "train.py").write_text("print('hello')\n")
    run: dict[str, Any] = tau.json("run")["run"]
    return str(run["id"])


def state(tau: Tau, run_id: str) -> str:
    return str(tau.json("status", run_id)["state"])


def test_a_run_goes_from_kueue_admission_to_success(tau: Tau, cluster: KueuePlayer) -> None:
    run_id = submit(tau, "hello")
    job = cluster.wait_job(run_id)
    # Created suspended with Kueue's labels; nothing else is running it.
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert state(tau, run_id) == "QUEUED"
    cluster.make_workload(job)
    wait_for(
        "the pending reason from Kueue",
        lambda: "insufficient unused quota" in str(tau.json("status", run_id)),
    )
    cluster.admit(job)
    tau.wait_state(run_id, {"ADMITTED"})
    job = cluster.wait_job(run_id)
    (pod,) = cluster.make_pods(job)
    cluster.pod_running(pod)
    tau.wait_state(run_id, {"RUNNING"})
    cluster.pod_exited(pod, 0)
    cluster.finish_job(job)
    tau.wait_state(run_id, {"SUCCEEDED"})
    # The finished attempt's objects are deleted (pods by the foreground deletion).
    wait_for("the Job deleted", lambda: cluster.job(job["metadata"]["name"]) is None)
