"""The GPU-health classifier: levels per catalog row and reading, dedup windows with
explicit times, escalation (48 with 63/64, RMA), unknown Xids, overrides, bad input."""

from __future__ import annotations

import math

import pytest

from taugrid.domain.health import (
    Classifier,
    ClassifierState,
    Decision,
    HealthRules,
    InvalidObservation,
    InvalidRules,
    Kind,
    Level,
    Observation,
    Scope,
    classify,
    load_catalog,
    release,
)

H = 3600.0
GPU, NODE = "GPU-aaaa", "node-1"


def xid(x: int, at: float, gpu: str = GPU, source: str = "nvml", detail: str = "") -> Observation:
    return Observation(Kind.XID, gpu, NODE, at, xid=x, source=source, detail=detail)


def run(events: list[Observation], rules: HealthRules | None = None) -> list[list[Decision]]:
    c = Classifier(rules)
    return [c.observe(e) for e in events]


def one(obs: Observation, rules: HealthRules | None = None) -> Decision:
    (decision,) = classify(ClassifierState(), obs, rules)[1]
    return decision


CATALOG_ROWS = sorted(load_catalog().entries.values(), key=lambda e: e.xid or 0)


@pytest.mark.parametrize("entry", CATALOG_ROWS, ids=lambda e: f"xid{e.xid}")
def test_each_catalog_xid_gets_its_level(entry: object) -> None:
    from taugrid.domain.health import XidEntry

    assert isinstance(entry, XidEntry) and entry.xid is not None
    d = one(xid(entry.xid, 0.0))
    assert d.level is (entry.level if entry.level is not None else Level.L0)
    assert d.reason.startswith(f"Xid {entry.xid} (") and "**" not in d.reason
    assert d.scope is (Scope.NODE if d.level >= Level.L3 else Scope.GPU)
    assert not d.duplicate and d.rma_candidate is (d.level is Level.L4)


@pytest.mark.parametrize(
    ("level", "cordon", "evict"),
    [(Level.L0, False, "none"), (Level.L1, False, "none"), (Level.L2, False, "gpu"),
     (Level.L3, True, "node"), (Level.L4, True, "gpu"), (Level.L5, True, "none")],
)  # fmt: skip
def test_what_each_level_asks_of_the_actuator(level: Level, cordon: bool, evict: str) -> None:
    d = one(xid(7, 0.0), HealthRules(overrides={7: level}))
    assert (d.level, d.cordon, d.evict) == (level, cordon, evict)


def test_reason_names_the_xid_and_carries_the_sources_words() -> None:
    d = one(xid(79, 5.0, detail="NVRM: Xid (PCI:0000:3b:00): 79"))
    assert d.reason == "Xid 79 (GPU fallen off the bus): NVRM: Xid (PCI:0000:3b:00): 79"
    assert d.level is Level.L3 and d.action.startswith("cordon and taint the node")


@pytest.mark.parametrize(
    ("kind", "value", "level"),
    [
        (Kind.ECC_DBE, 3, Level.L2),
        (Kind.ECC_DBE, None, Level.L2),
        (Kind.ECC_DBE, 0, Level.L0),
        (Kind.REMAP_PENDING, None, Level.L0),
        (Kind.REMAP_FAILURE, None, Level.L4),
        (Kind.RECOVERY_ACTION, "NONE", Level.L0),
        (Kind.RECOVERY_ACTION, "GPU_RESET", Level.L2),
        (Kind.RECOVERY_ACTION, "drain_p2p", Level.L2),
        (Kind.RECOVERY_ACTION, 4, Level.L2),
        (Kind.RECOVERY_ACTION, "NODE_REBOOT", Level.L3),
        (Kind.RECOVERY_ACTION, 2, Level.L3),
        (Kind.NVLINK_DOWN, None, Level.L2),
        (Kind.THERMAL, 91.0, Level.L0),
        (Kind.GPU_MISSING, None, Level.L3),
        (Kind.NVML_HANG, 47.5, Level.L3),
    ],
)
def test_readings_other_than_xids(kind: Kind, value: float | str | None, level: Level) -> None:
    d = one(Observation(kind, GPU, NODE, 0.0, value=value))
    assert d.level is level
    assert d.rma_candidate is (level is Level.L4)


def test_remap_pending_queues_an_idle_reset_without_eviction() -> None:
    d = one(Observation(Kind.REMAP_PENDING, GPU, NODE, 0.0))
    assert "next idle" in d.action and d.evict == "none"
    assert "next idle" in one(xid(63, 0.0)).action


def test_a_node_reading_without_a_gpu_is_node_scoped() -> None:
    state, (d,) = classify(ClassifierState(), Observation("gpu_missing", "", NODE, 1.0))
    assert (d.scope, d.level, d.gpu_uuid) == (Scope.NODE, Level.L3, "")
    assert state.standing(NODE) is Level.L3


def test_a_node_fault_on_a_gpu_raises_the_nodes_standing_too() -> None:
    state, _ = classify(ClassifierState(), xid(79, 0.0))
    assert state.standing(NODE, GPU) is Level.L3 and state.standing(NODE) is Level.L3
    state, _ = classify(ClassifierState(), xid(46, 0.0))
    assert state.standing(NODE, GPU) is Level.L2 and state.standing(NODE) is Level.L0


# -- dedup ------------------------------------------------------------------------------
def test_identical_events_within_the_window_are_one_event() -> None:
    out = run([xid(46, 0.0), xid(46, 179.0), xid(46, 180.0), xid(46, 181.0)])
    assert [d.duplicate for (d,) in out] == [False, True, True, False]
    assert all(d.level is Level.L2 for (d,) in out)


def test_the_window_runs_from_the_last_event_acted_on() -> None:
    # 100 and 170 are duplicates of 0; 200 is 200 s after the last event acted on.
    out = run([xid(46, 0.0), xid(46, 100.0), xid(46, 170.0), xid(46, 200.0), xid(46, 350.0)])
    assert [d.duplicate for (d,) in out] == [False, True, True, False, True]


def test_a_reading_that_turns_worse_is_not_a_duplicate() -> None:
    def ecc(at: float, delta: int) -> Observation:
        return Observation(Kind.ECC_DBE, GPU, NODE, at, value=delta)

    def ra(at: float, action: str) -> Observation:
        return Observation(Kind.RECOVERY_ACTION, GPU, NODE, at, value=action)

    out = run([ecc(0.0, 0), ecc(15.0, 3), ecc(30.0, 5)])
    assert [(d.level, d.duplicate) for (d,) in out] == [
        (Level.L0, False), (Level.L2, False), (Level.L2, True),
    ]  # fmt: skip
    out = run([ra(0.0, "NONE"), ra(15.0, "GPU_RESET"), ra(30.0, "DRAIN_AND_RESET")])
    assert [(d.level, d.duplicate) for (d,) in out] == [
        (Level.L0, False), (Level.L2, False), (Level.L2, True),
    ]  # fmt: skip


def test_different_gpus_kinds_and_xids_are_not_duplicates() -> None:
    events = [
        xid(46, 0.0),
        xid(46, 1.0, gpu="GPU-bbbb"),
        xid(62, 2.0),
        Observation(Kind.NVLINK_DOWN, GPU, NODE, 3.0),
    ]
    assert not any(d.duplicate for ds in run(events) for d in ds)


def test_the_same_xid_from_two_sources_within_30_s_is_one_event() -> None:
    rules = HealthRules(dedup_s=10.0)  # so the cross-source window shows on its own
    out = run([xid(46, 0.0, source="nvml"), xid(46, 25.0, source="kmsg")], rules)
    assert [d.duplicate for (d,) in out] == [False, True]
    out = run([xid(46, 0.0, source="nvml"), xid(46, 25.0, source="nvml")], rules)
    assert [d.duplicate for (d,) in out] == [False, False]
    out = run([xid(46, 0.0, source="nvml"), xid(46, 31.0, source="kmsg")], rules)
    assert [d.duplicate for (d,) in out] == [False, False]


def test_a_duplicate_leaves_the_state_as_it_was() -> None:
    state, _ = classify(ClassifierState(), xid(46, 0.0))
    again, (d,) = classify(state, xid(46, 60.0))
    assert d.duplicate and again is state


def test_dedup_off_acts_on_every_event() -> None:
    out = run([xid(46, 0.0), xid(46, 0.0)], HealthRules(dedup_s=0.0, cross_source_s=0.0))
    assert out[1][0].duplicate  # the same instant is still the same event
    out = run([xid(46, 0.0), xid(46, 0.5)], HealthRules(dedup_s=0.0, cross_source_s=0.0))
    assert not out[1][0].duplicate


# -- escalation -------------------------------------------------------------------------
@pytest.mark.parametrize(("second", "gap"), [(63, 10.0), (64, 10.0), (63, 30.0)])
def test_dbe_then_a_remap_xid_within_30_s_is_a_node_fault(second: int, gap: float) -> None:
    first, then = run([xid(48, 100.0), xid(second, 100.0 + gap)])
    assert [d.level for d in first] == [Level.L2]
    assert then[-1].level is Level.L3 and then[-1].scope is Scope.NODE
    assert then[-1].cordon and then[-1].evict == "node"
    assert then[-1].reason == "Xid 48 (DBE) with Xid 63/64 within 30 s"


def test_dbe_then_a_remap_xid_after_30_s_is_not() -> None:
    _, then = run([xid(48, 100.0), xid(63, 130.5)])
    assert [d.level for d in then] == [Level.L0]


def test_the_remap_xid_first_pairs_too() -> None:
    _, then = run([xid(63, 0.0), xid(48, 5.0)])
    assert [d.level for d in then] == [Level.L2, Level.L3]


def test_the_pair_is_per_gpu() -> None:
    _, then = run([xid(48, 0.0), xid(63, 5.0, gpu="GPU-bbbb")])
    assert [d.level for d in then] == [Level.L0]


def test_five_fatal_xids_within_24_h_make_an_rma_candidate() -> None:
    times = [0.0, 4 * H, 8 * H, 12 * H, 24 * H]
    out = run([xid(x, t) for x, t in zip([46, 62, 95, 109, 46], times, strict=True)])
    assert all(len(ds) == 1 for ds in out[:4])
    base, rma = out[4]
    assert base.level is Level.L2
    assert rma.level is Level.L4 and rma.rma_candidate and rma.standing is Level.L4
    assert rma.reason == "5 fatal Xids on the GPU within 24 h"


def test_five_fatal_xids_spread_over_25_h_do_not() -> None:
    out = run([xid(46, i * 6.25 * H) for i in range(5)])
    assert not any(d.rma_candidate for ds in out for d in ds)


def test_duplicates_do_not_count_toward_an_rma() -> None:
    out = run([xid(46, float(t)) for t in range(0, 150, 30)])
    assert not any(d.rma_candidate for ds in out for d in ds)


def test_non_fatal_and_demoted_xids_do_not_count() -> None:
    out = run([xid(13, i * H) for i in range(6)])  # RESTART_APP: a job fault
    assert not any(d.rma_candidate for ds in out for d in ds)
    demoted = HealthRules(overrides={46: Level.L1})
    out = run([xid(46, i * H) for i in range(6)], demoted)
    assert not any(d.rma_candidate for ds in out for d in ds)


@pytest.mark.parametrize("x", [64, 140])
def test_xid_64_or_140_repeated_is_an_rma_candidate(x: int) -> None:
    first, second = run([xid(x, 0.0), xid(x, 2 * H)])
    assert not any(d.rma_candidate for d in first)
    assert [d.level for d in second] == [Level.L2, Level.L4]
    assert second[1].reason == f"Xid {x} seen 2 times within 24 h"


def test_a_remap_failure_is_an_rma_candidate() -> None:
    d = one(Observation(Kind.REMAP_FAILURE, GPU, NODE, 0.0))
    assert d.level is Level.L4 and d.rma_candidate and d.cordon and d.evict == "gpu"


def test_an_rma_candidate_stays_one() -> None:
    c = Classifier()
    c.observe(Observation(Kind.REMAP_FAILURE, GPU, NODE, 0.0))
    (d,) = c.observe(xid(13, 600.0))
    assert d.level is Level.L1 and d.standing is Level.L4
    assert c.state.standing(NODE, GPU) is Level.L4


def test_release_lowers_the_standing_and_keeps_the_history() -> None:
    state, _ = classify(ClassifierState(), xid(64, 0.0))
    state = release(state, NODE, GPU)
    assert state.standing(NODE, GPU) is Level.L0
    state, decisions = classify(state, xid(64, H))
    assert decisions[-1].rma_candidate  # the first 64 is still counted
    assert release(ClassifierState(), NODE) == ClassifierState()


def test_the_same_fault_after_a_return_is_a_new_fault_not_a_duplicate() -> None:
    state, _ = classify(ClassifierState(), xid(79, 0.0))
    _, again = classify(state, xid(79, 10.0))
    assert again[0].duplicate  # within the window, before anyone returned the GPU
    state = release(state, NODE, GPU)
    _, after = classify(state, xid(79, 10.0))
    assert not after[0].duplicate and after[0].standing is Level.L3


# -- unknown Xids and overrides ---------------------------------------------------------
def test_an_unknown_xid_fails_closed() -> None:
    d = one(xid(999, 0.0))
    assert d.level is Level.L5 and d.scope is Scope.NODE
    assert d.cordon and d.evict == "none"
    assert d.reason == "Xid 999 (not in the catalog: fail closed)"


def test_overrides_change_a_level() -> None:
    rules = HealthRules(overrides={13: Level.L2, 999: Level.L1, 79: Level.L2})
    assert one(xid(13, 0.0), rules).level is Level.L2
    assert one(xid(79, 0.0), rules).level is Level.L2
    d = one(xid(999, 0.0), rules)
    assert d.level is Level.L1 and "level from rules" in d.reason
    assert one(xid(13, 0.0)).level is Level.L1  # the defaults are untouched


def test_kind_and_recovery_levels_can_be_overridden() -> None:
    from taugrid.domain.health import RecoveryAction

    rules = HealthRules(
        kind_levels={Kind.THERMAL: Level.L2},
        recovery_levels={RecoveryAction.DRAIN_P2P: Level.L0},
    )
    assert one(Observation(Kind.THERMAL, GPU, NODE, 0.0, value=95), rules).level is Level.L2
    obs = Observation(Kind.RECOVERY_ACTION, GPU, NODE, 0.0, value="DRAIN_P2P")
    assert one(obs, rules).level is Level.L0


# -- purity and bad input ---------------------------------------------------------------
def test_classify_does_not_change_the_state_it_is_given() -> None:
    state, _ = classify(ClassifierState(), xid(48, 0.0))
    before = {n: dict(g) for n, g in state.nodes.items()}
    new, _ = classify(state, xid(63, 5.0))
    assert {n: dict(g) for n, g in state.nodes.items()} == before and new is not state


def test_out_of_order_events_are_handled() -> None:
    out = run([xid(63, 50.0), xid(48, 40.0), xid(46, 10.0)])  # a kmsg backlog, say
    assert out[1][-1].level is Level.L3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "xid", "xid": -1}, "negative"),
        ({"kind": "xid", "xid": None}, "not an integer"),
        ({"kind": "xid", "xid": True}, "not an integer"),
        ({"kind": "xid", "xid": 79, "gpu_uuid": ""}, "no GPU"),
        ({"kind": "ecc_dbe", "gpu_uuid": ""}, "no GPU"),
        ({"kind": "xid", "xid": 79, "at": math.nan}, "finite"),
        ({"kind": "xid", "xid": 79, "at": math.inf}, "finite"),
        ({"kind": "xid", "xid": 79, "node": ""}, "node"),
        ({"kind": "smoke"}, "kind"),
        ({"kind": "thermal", "xid": 79}, "non-Xid"),
        ({"kind": "thermal", "value": math.nan}, "finite"),
        ({"kind": "recovery_action", "value": "REBOOT_MAYBE"}, "recovery action"),
        ({"kind": "recovery_action", "value": 9}, "recovery action"),
        ({"kind": "recovery_action"}, "recovery action"),
    ],
)
def test_malformed_observations_are_refused(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"gpu_uuid": GPU, "node": NODE, "at": 0.0, **kwargs}
    with pytest.raises(InvalidObservation, match=match):
        Observation(**args)  # type: ignore[arg-type]
    assert issubclass(InvalidObservation, ValueError)


@pytest.mark.parametrize(
    "kwargs",
    [{"dedup_s": -1.0}, {"rma_window_s": math.nan}, {"rma_fatal_count": 0},
     {"overrides": {-4: Level.L1}}, {"overrides": {13: 2}},
     {"kind_levels": {Kind.XID: Level.L0}}],
)  # fmt: skip
def test_bad_rules_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidRules):
        HealthRules(**kwargs)  # type: ignore[arg-type]
