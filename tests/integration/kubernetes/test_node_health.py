"""The GPU health controller's hands on a cluster (executors/kubernetes/node_health.py),
through the real client against the emulator over HTTP: cordon with TauGrid's taint and
marker, evictions through the Eviction API waiting out a PodDisruptionBudget's 429, and
uncordon only of the nodes TauGrid cordoned."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakeclock import SleepingClock
from kube_emulator import KubeEmulator
from recording import gpu_node as node
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient
from taugrid.executors.kubernetes.node_health import CORDONED_BY, TAINT_KEY, KubeNodeActuator

pytestmark = pytest.mark.timeout(30)


def pod(
    name: str, node_name: str, ours: bool = True, gpus: int = 1, run_id: str = "train"
) -> dict[str, Any]:
    labels = (
        {"taugrid.io/managed-by": "taugrid", "taugrid.io/run-id": run_id}
        if ours
        else {"app": "other", "taugrid.io/run-id": "spoofed"}
    )
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    container = {"name": "workload", "image": "x", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels, "uid": f"uid-{name}"},
        "spec": {"nodeName": node_name, "containers": [container]},
    }


@pytest.fixture
def actuator(
    kube_emulator: KubeEmulator, tmp_path: Path
) -> Iterator[tuple[KubeNodeActuator, SleepingClock]]:
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    clock = SleepingClock()
    with LightkubeClient.from_kubeconfig(config, timeout_s=5.0, sleep=lambda s: None) as client:
        yield KubeNodeActuator(client, clock=clock, sleep=clock.sleep), clock


def test_cordon_taints_marks_and_keeps_other_taints_then_uncordon_undoes_only_ours(
    kube_emulator: KubeEmulator, actuator: tuple[KubeNodeActuator, SleepingClock]
) -> None:
    act, _ = actuator
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    kube_emulator.put(node("gpu-1", taints=[other]))
    kube_emulator.put(node("cpu-1", gpus=0))
    assert act.gpu_nodes() == ["gpu-1"]
    assert act.cordon("gpu-1", "Xid 79 (GPU fallen off the bus)")
    assert not act.cordon("gpu-1", "Xid 79 (GPU fallen off the bus)")  # already ours
    got = kube_emulator.get("v1", "Node", None, "gpu-1")
    assert got is not None and got["spec"]["unschedulable"] is True
    assert got["metadata"]["annotations"][CORDONED_BY] == "taugrid"
    taints = got["spec"]["taints"]
    assert other in taints
    ours = next(t for t in taints if t["key"] == TAINT_KEY)
    assert ours["effect"] == "NoSchedule" and ours["value"] == "Xid-79-GPU-fallen-off-the-bus"
    assert act.uncordon("gpu-1")
    back = kube_emulator.get("v1", "Node", None, "gpu-1")
    assert back is not None and not back["spec"].get("unschedulable")
    assert back["spec"]["taints"] == [other]
    assert CORDONED_BY not in (back["metadata"].get("annotations") or {})


def test_a_node_someone_else_cordoned_is_tainted_but_never_uncordoned_by_us(
    kube_emulator: KubeEmulator, actuator: tuple[KubeNodeActuator, SleepingClock]
) -> None:
    act, _ = actuator
    kube_emulator.put(node("gpu-2", unschedulable=True))  # kubectl cordon by a person
    assert not act.cordon("gpu-2", "Xid 79")
    got = kube_emulator.get("v1", "Node", None, "gpu-2")
    assert got is not None and any(t["key"] == TAINT_KEY for t in got["spec"]["taints"])
    assert not act.uncordon("gpu-2")
    still = kube_emulator.get("v1", "Node", None, "gpu-2")
    assert still is not None and still["spec"]["unschedulable"] is True


def test_evictions_wait_out_a_disruption_budget_and_pods_say_whose_they_are(
    kube_emulator: KubeEmulator, actuator: tuple[KubeNodeActuator, SleepingClock]
) -> None:
    act, clock = actuator
    kube_emulator.put(pod("train-a0-0", "gpu-1"))
    kube_emulator.put(pod("train-a0-1", "gpu-2"))
    kube_emulator.put(pod("someone-else", "gpu-1", ours=False))
    kube_emulator.put(pod("sidecar-ds", "gpu-1", ours=False, gpus=0))
    on = {p.name: p for p in act.pods_on("gpu-1")}
    assert sorted(on) == ["sidecar-ds", "someone-else", "train-a0-0"]
    assert on["train-a0-0"].run_id == "train" and on["train-a0-0"].gpus == 1
    assert on["someone-else"].run_id == "" and on["someone-else"].gpus == 1  # label not ours
    assert on["sidecar-ds"].gpus == 0 and on["train-a0-0"].uid == "uid-train-a0-0"
    kube_emulator.fail_next(
        r"/api/v1/namespaces/team-a/pods/train-a0-0/eviction",
        429,
        times=3,
        message="Cannot evict pod as it would violate the pod's disruption budget.",
    )
    assert act.evict("team-a", "train-a0-0")
    assert clock.slept == [10.0, 20.0, 40.0]  # 10 s, doubling (to at most 2 min)
    assert kube_emulator.evictions() == [("team-a", "train-a0-0")]
    assert kube_emulator.get("v1", "Pod", "team-a", "train-a0-0") is None
    assert act.evict("team-a", "train-a0-0")  # gone already: evicted
    # A budget that never allows it: given up at the deadline, the pod left alone.
    kube_emulator.fail_next(r"/api/v1/namespaces/team-a/pods/train-a0-1/eviction", 429, times=99)
    assert not act.evict("team-a", "train-a0-1", deadline_s=300.0)
    assert sum(clock.slept[3:]) <= 300.0
    assert kube_emulator.get("v1", "Pod", "team-a", "train-a0-1") is not None
