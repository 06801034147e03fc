"""What a health decision does on one machine, decided purely (domain.health.effects)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from taugrid.domain.health import Kind, Observation, classify
from taugrid.domain.health.classify import ClassifierState, Decision
from taugrid.domain.health.effects import (
    APPLIED,
    BREAKER,
    DUPLICATE,
    RECORDED,
    SHADOW,
    Breaker,
    LocalGpu,
    breaker_allows,
    local_effects,
)

GPUS = [LocalGpu(i, f"GPU-{i}") for i in range(4)]
HOLDERS = {0: ["train-a"], 1: ["train-b"], 2: ["train-b"]}


def decide(xid: int, gpu: str = "GPU-0", at: float = 100.0) -> Decision:
    _, decisions = classify(ClassifierState(), Observation(Kind.XID, gpu, "local", at, xid=xid))
    return decisions[0]


def test_a_gpu_fault_takes_out_that_gpu_and_stops_its_runs_only() -> None:
    e = local_effects(decide(79), GPUS, HOLDERS, frozenset())  # L3, but one GPU named
    assert e.outcome == APPLIED
    assert e.quarantine == (GPUS[0],) and e.stop_runs == ("train-a",)
    assert "GPU 0" in e.words and "train-a" in e.words


def test_an_application_error_takes_nothing_out() -> None:
    e = local_effects(decide(13), GPUS, HOLDERS, frozenset())  # L1
    assert e.outcome == RECORDED and e.quarantine == () and e.stop_runs == ()


def test_an_unknown_xid_fails_closed_and_stops_nothing() -> None:
    e = local_effects(decide(9999), GPUS, HOLDERS, frozenset())
    assert e.outcome == APPLIED and e.quarantine == (GPUS[0],) and e.stop_runs == ()
    assert "human" in e.words


def test_a_fault_naming_no_gpu_of_this_machine_takes_all_out() -> None:
    e = local_effects(decide(79, gpu="PCI:0000:3b:00"), GPUS, HOLDERS, frozenset())
    assert e.quarantine == tuple(GPUS) and e.stop_runs == ("train-a", "train-b")


def test_shadow_mode_and_the_breaker_record_without_acting() -> None:
    e = local_effects(decide(79), GPUS, HOLDERS, frozenset(), shadow=True)
    assert e.outcome == SHADOW and e.quarantine == () and "would take GPU 0" in e.words
    # One GPU of four already out within the window: 20 % allows one.
    e = local_effects(
        decide(79, gpu="GPU-1"), GPUS, HOLDERS, frozenset({"GPU-0"}), taken_out_at=[90.0]
    )
    assert e.outcome == BREAKER and e.quarantine == () and e.stop_runs == ()
    # Outside the window the next one is taken out.
    e = local_effects(
        decide(79, gpu="GPU-1", at=1000.0), GPUS, HOLDERS, frozenset({"GPU-0"}), taken_out_at=[90.0]
    )
    assert e.outcome == APPLIED and e.quarantine == (GPUS[1],)


def test_a_duplicate_does_nothing() -> None:
    d = decide(79)
    dup = dataclasses.replace(d, duplicate=True)
    assert local_effects(dup, GPUS, HOLDERS, frozenset()).outcome == DUPLICATE


@given(
    st.lists(st.floats(min_value=0, max_value=2000), max_size=30),
    st.integers(min_value=1, max_value=100),
    st.integers(min_value=0, max_value=5),
)
def test_the_breaker_never_lets_more_than_its_share_out_in_a_window(
    times: list[float], fleet: int, new: int
) -> None:
    b = Breaker(share=0.2, window_s=600.0)
    now = 2000.0
    recent = sum(1 for t in times if now - 600.0 < t <= now)
    if breaker_allows(times, now, new, fleet, b) and new:
        assert recent + new <= max(1, int(0.2 * fleet))


def test_on_a_cluster_a_node_fault_cordons_and_evicts_and_a_gpu_fault_evicts_its_pods() -> None:
    from taugrid.domain.health.effects import node_effects

    node = node_effects(decide(79), gpu_nodes=10)
    assert (node.outcome, node.cordon, node.evict) == (APPLIED, True, "node")
    gpu = node_effects(decide(95), gpu_nodes=10)
    assert (gpu.outcome, gpu.cordon, gpu.evict) == (APPLIED, False, "gpu")
    unknown = node_effects(decide(9999), gpu_nodes=10)
    assert (unknown.cordon, unknown.evict) == (True, "none") and "human" in unknown.words
    assert node_effects(decide(13), gpu_nodes=10).outcome == RECORDED
    assert node_effects(decide(79), gpu_nodes=10, shadow=True).outcome == SHADOW
    # 20 % of 10 nodes: two cordons within 10 minutes, the third is held back.
    burst = node_effects(decide(79, at=100.0), gpu_nodes=10, cordoned_at=[50.0, 60.0])
    assert burst.outcome == BREAKER and not burst.cordon
    # A node already cordoned is no new cordon: its pods still go.
    again = node_effects(
        decide(79, at=100.0), gpu_nodes=10, cordoned_at=[50.0, 60.0], already_cordoned=True
    )
    assert again.outcome == APPLIED and again.evict == "node"
