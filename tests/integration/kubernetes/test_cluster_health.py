"""The cluster's GPU health controller (server/health_cluster.py) on real SQLite, with the
real node actuator and client against the emulator over HTTP, and a recording stopper
in the engine's place: what the agents' reports make it record, cordon, stop and evict,
the circuit breaker on a burst, shadow mode, and a person's return (only TauGrid's own
cordons are undone)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakeclock import SleepingClock
from kube_emulator import KubeEmulator
from recording import Stops
from recording import gpu_node as node
from taugrid.domain.health import Kind, Observation
from taugrid.domain.health.effects import Breaker
from taugrid.domain.stops import StopReason
from taugrid.executors.kubernetes.lightkube_client import LightkubeClient
from taugrid.executors.kubernetes.node_health import CORDONED_BY, TAINT_KEY, KubeNodeActuator
from taugrid.server.health_cluster import ClusterHealthController, NodeReport
from taugrid.store import connect
from taugrid.store.health import HealthStore

pytestmark = pytest.mark.timeout(60)
T0 = 1_796_000_000.0


def pod(name: str, node_name: str, *, run: str = "", gpus: int = 1) -> dict[str, Any]:
    labels = {"taugrid.io/managed-by": "taugrid", "taugrid.io/run-id": run} if run else {}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels, "uid": f"u-{name}"},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
        },
    }


def xid(node_name: str, gpu: str, number: int, at: float = T0) -> Observation:
    return Observation(Kind.XID, gpu, node_name, at, xid=number, source="kmsg")


@pytest.fixture
def parts(
    kube_emulator: KubeEmulator, tmp_path: Path
) -> Iterator[tuple[KubeNodeActuator, HealthStore, SleepingClock]]:
    config = kube_emulator.write_kubeconfig(tmp_path / "kubeconfig")
    clock = SleepingClock()
    with LightkubeClient.from_kubeconfig(config, timeout_s=5.0, sleep=lambda s: None) as client:
        act = KubeNodeActuator(client, clock=clock, sleep=clock.sleep)
        yield act, HealthStore(connect(f"sqlite:///{tmp_path / 'tau.db'}")), clock


def controller(
    parts: tuple[KubeNodeActuator, HealthStore, SleepingClock], stops: Stops, **kw: Any
) -> ClusterHealthController:
    act, store, _ = parts
    return ClusterHealthController(store, act, stops, clock=lambda: T0 + 5, evict_async=False, **kw)


def test_an_l3_fault_cordons_taints_stops_the_nodes_runs_and_evicts_other_gpu_pods(
    kube_emulator: KubeEmulator, parts: tuple[KubeNodeActuator, HealthStore, SleepingClock]
) -> None:
    for n in ("gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"):
        kube_emulator.put(node(n))
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    kube_emulator.patch_status("v1", "Node", None, "gpu-1", {"conditions": [ready]})
    kube_emulator.put(pod("train-a0-0", "gpu-1", run="train"))
    kube_emulator.put(pod("eval-a0-0", "gpu-1", run="eval"))
    kube_emulator.put(pod("elsewhere-a0-0", "gpu-2", run="elsewhere"))
    kube_emulator.put(pod("notebook", "gpu-1"))  # someone else's GPU pod
    kube_emulator.put(pod("exporter", "gpu-1", gpus=0))  # a pod with no GPU stays
    # A PodDisruptionBudget says "not now" once: the eviction is retried after 10 s.
    kube_emulator.fail_next(r"/api/v1/namespaces/team-a/pods/notebook/eviction", 429)
    stops = Stops()
    c = controller(parts, stops)
    standing = c.report(NodeReport("gpu-1", [xid("gpu-1", "GPU-a", 79)]))

    assert not standing.healthy and standing.level == 3
    got = kube_emulator.get("v1", "Node", None, "gpu-1")
    assert got is not None
    (cond,) = [c for c in got["status"]["conditions"] if c["type"] == "GPUHealthy"]
    assert (cond["status"], cond["reason"]) == ("False", "GPUFaultL3")
    assert "Xid 79" in cond["message"]
    assert {c["type"] for c in got["status"]["conditions"]} == {"Ready", "GPUHealthy"}
    assert got is not None and got["spec"]["unschedulable"] is True
    assert got["metadata"]["annotations"][CORDONED_BY] == "taugrid"
    assert any(t["key"] == TAINT_KEY and t["effect"] == "NoSchedule" for t in got["spec"]["taints"])
    assert [(r, why, at) for r, why, _, at in stops.calls] == [
        ("eval", StopReason.HARDWARE, T0),
        ("train", StopReason.HARDWARE, T0),
    ]
    assert "Xid 79" in stops.calls[0][2] and "gpu-1" in stops.calls[0][2]
    assert kube_emulator.evictions() == [("team-a", "notebook")]  # after its 429
    assert parts[2].slept == [10.0]
    assert kube_emulator.get("v1", "Pod", "team-a", "exporter") is not None
    (event,) = parts[1].events()
    assert event["outcome"] == "applied" and event["action"] == "cordon the node"
    assert event["runs"] == ["eval", "train"] and event["xid"] == 79
    # The same fault again is a duplicate: nothing more is stopped.
    c.report(NodeReport("gpu-1", [xid("gpu-1", "GPU-a", 79, T0 + 1)]))
    assert len(stops.calls) == 2 and parts[1].events()[0]["outcome"] == "duplicate"


def test_an_l2_fault_stops_only_the_runs_on_that_gpu_and_cordons_nothing(
    kube_emulator: KubeEmulator, parts: tuple[KubeNodeActuator, HealthStore, SleepingClock]
) -> None:
    kube_emulator.put(node("gpu-1"))
    kube_emulator.put(pod("train-a0-0", "gpu-1", run="train"))
    kube_emulator.put(pod("eval-a0-0", "gpu-1", run="eval"))
    stops = Stops()
    c = controller(parts, stops)
    gpus = [{"index": 0, "uuid": "GPU-a", "name": "H100"}, {"index": 1, "uuid": "GPU-b"}]
    rep = NodeReport(
        "gpu-1",
        [xid("gpu-1", "GPU-b", 95)],
        gpus=gpus,
        gpu_pods={"GPU-a": ["team-a/train-a0-0"], "GPU-b": ["team-a/eval-a0-0"]},
    )
    standing = c.report(rep)
    assert [s[0] for s in stops.calls] == ["eval"]
    got = kube_emulator.get("v1", "Node", None, "gpu-1")
    assert got is not None and not got["spec"].get("unschedulable")
    (row,) = parts[1].quarantined()
    assert (row["gpu"], row["node"], row["gpu_index"], row["level"]) == ("GPU-b", "gpu-1", 1, 2)
    assert not standing.healthy and "Xid 95" in standing.reason
    (view,) = c.nodes_view()
    assert view["health"] == "unhealthy" and view["out_of_service"][0]["gpu"] == "GPU-b"
    assert not view["cordoned_by_taugrid"]


def test_without_the_agents_gpu_map_an_l2_fault_fails_safe_and_says_so(
    kube_emulator: KubeEmulator, parts: tuple[KubeNodeActuator, HealthStore, SleepingClock]
) -> None:
    kube_emulator.put(node("gpu-1"))
    kube_emulator.put(pod("train-a0-0", "gpu-1", run="train"))
    kube_emulator.put(pod("eval-a0-0", "gpu-1", run="eval"))
    stops = Stops()
    controller(parts, stops).report(NodeReport("gpu-1", [xid("gpu-1", "GPU-b", 95)]))
    assert sorted(s[0] for s in stops.calls) == ["eval", "train"]
    assert "named no pods per GPU" in parts[1].events()[0]["reason"]


def test_a_burst_across_nodes_trips_the_breaker_and_is_recorded_not_acted_on(
    kube_emulator: KubeEmulator, parts: tuple[KubeNodeActuator, HealthStore, SleepingClock]
) -> None:
    names = [f"gpu-{i}" for i in range(10)]
    for n in names:
        kube_emulator.put(node(n))
        kube_emulator.put(pod(f"run-{n}-a0-0", n, run=f"run-{n}"))
    stops = Stops()
    c = controller(parts, stops)  # default breaker: 20 % of 10 GPU nodes in 10 min
    for i, n in enumerate(names[:4]):
        c.report(NodeReport(n, [xid(n, f"GPU-{n}", 79, T0 + i)]))
    cordoned = [
        n
        for n in names
        if (kube_emulator.get("v1", "Node", None, n) or {})["spec"].get("unschedulable")
    ]
    assert cordoned == ["gpu-0", "gpu-1"]
    assert [s[0] for s in stops.calls] == ["run-gpu-0", "run-gpu-1"]
    outcomes = [e["outcome"] for e in reversed(parts[1].events())]
    assert outcomes == ["applied", "applied", "breaker", "breaker"]
    assert "circuit breaker open" in parts[1].events()[0]["reason"]
    # A restarted server keeps the window: a fifth node is held back as well.
    again = controller(parts, stops)
    again.restore()
    again.report(NodeReport("gpu-5", [xid("gpu-5", "GPU-gpu-5", 79, T0 + 9)]))
    assert parts[1].events()[0]["outcome"] == "breaker"
    # Past the window, cordons are allowed again.
    later = controller(parts, stops, breaker=Breaker(0.2, 600.0))
    later.report(NodeReport("gpu-6", [xid("gpu-6", "GPU-gpu-6", 79, T0 + 700)]))
    assert parts[1].events()[0]["outcome"] == "applied"


def test_shadow_mode_records_what_it_would_do_and_does_nothing(
    kube_emulator: KubeEmulator, parts: tuple[KubeNodeActuator, HealthStore, SleepingClock]
) -> None:
    kube_emulator.put(node("gpu-1"))
    kube_emulator.put(pod("train-a0-0", "gpu-1", run="train"))
    stops = Stops()
    controller(parts, stops, shadow=True).report(NodeReport("gpu-1", [xid("gpu-1", "GPU-a", 79)]))
    assert stops.calls == [] and kube_emulator.evictions() == []
    got = kube_emulator.get("v1", "Node", None, "gpu-1")
    assert got is not None and not got["spec"].get("unschedulable")
    (event,) = parts[1].events()
    assert event["outcome"] == "shadow" and "would cordon" in event["reason"]


def test_return_uncordons_only_taugrids_cordon_and_a_new_fault_acts_again(
    kube_emulator: KubeEmulator, parts: tuple[KubeNodeActuator, HealthStore, SleepingClock]
) -> None:
    kube_emulator.put(node("gpu-1"))
    kube_emulator.put(node("gpu-2", unschedulable=True))  # a person's kubectl cordon
    for i in range(3, 11):  # ten GPU nodes: the breaker allows two cordons in its window
        kube_emulator.put(node(f"gpu-{i}"))
    stops = Stops()
    c = controller(parts, stops)
    c.report(NodeReport("gpu-1", [xid("gpu-1", "GPU-a", 79)]))
    c.report(NodeReport("gpu-2", [xid("gpu-2", "GPU-c", 79, T0 + 1)]))
    assert c.return_node("gpu-1", "alice")
    back = kube_emulator.get("v1", "Node", None, "gpu-1")
    assert back is not None and not back["spec"].get("unschedulable")
    (cond,) = back["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "GPUHealthy",
        "True",
        "AllGPUsHealthy",
    )
    assert not any(t["key"] == TAINT_KEY for t in back["spec"].get("taints") or [])
    c.return_node("gpu-2", "alice")
    theirs = kube_emulator.get("v1", "Node", None, "gpu-2")
    assert theirs is not None and theirs["spec"]["unschedulable"] is True  # still theirs
    assert not c.return_node("gpu-1", "alice")  # nothing of it is out any more
    assert parts[1].events()[0]["kind"] == "returned"
    # The same Xid after the return is a new fault, never a duplicate of the old one.
    c.report(NodeReport("gpu-1", [xid("gpu-1", "GPU-a", 79, T0 + 2)]))
    again = kube_emulator.get("v1", "Node", None, "gpu-1")
    assert again is not None and again["spec"]["unschedulable"] is True
    with pytest.raises(Exception, match="no GPU node"):
        c.return_node("cpu-9", "alice")


def test_an_agent_speaks_for_its_own_node_only(
    parts: tuple[KubeNodeActuator, HealthStore, SleepingClock],
) -> None:
    c = controller(parts, Stops())
    with pytest.raises(Exception, match="its own node only"):
        c.report(NodeReport("gpu-1", [xid("gpu-2", "GPU-a", 79)]))
    assert parts[1].events() == []
