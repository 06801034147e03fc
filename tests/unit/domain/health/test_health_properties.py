"""Properties of the classifier over any sequence of valid observations: it never fails,
never lowers a standing (an RMA candidate stays one), never acts twice on one event
within the dedup window, and the stateful Classifier agrees with the pure classify."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from taugrid.domain.health import (
    Classifier,
    ClassifierState,
    HealthRules,
    Kind,
    Level,
    Observation,
    RecoveryAction,
    classify,
    load_catalog,
)

XIDS = [*sorted(load_catalog().entries), 0, 7, 999, 100_000]
GPUS = ["GPU-a", "GPU-b", "GPU-c"]


@st.composite
def observations(draw: st.DrawFn, span_s: float) -> Observation:
    kind = draw(st.sampled_from(list(Kind)))
    gpu = draw(st.sampled_from(GPUS + ([""] if kind in (Kind.GPU_MISSING, Kind.NVML_HANG) else [])))
    node = "n1" if gpu in ("GPU-a", "GPU-b", "") else "n2"
    at = draw(st.floats(min_value=0, max_value=span_s, allow_nan=False))
    value: float | str | None = None
    if kind is Kind.RECOVERY_ACTION:
        value = draw(st.sampled_from(list(RecoveryAction))).value
    elif kind in (Kind.ECC_DBE, Kind.THERMAL):
        value = draw(st.none() | st.integers(min_value=0, max_value=5))
    x = draw(st.sampled_from(XIDS)) if kind is Kind.XID else None
    source = draw(st.sampled_from(["nvml", "kmsg"]))
    return Observation(kind, gpu, node, at, xid=x, value=value, source=source)


def sequences(ordered: bool, span_s: float = 3 * 24 * 3600) -> st.SearchStrategy[list[Observation]]:
    """Up to 60 observations over ``span_s`` (a short span makes duplicates likely)."""
    seqs = st.lists(observations(span_s), max_size=60)
    return seqs.map(lambda s: sorted(s, key=lambda o: o.at)) if ordered else seqs


@settings(max_examples=200, deadline=None)
@given(sequences(ordered=False))
def test_standings_never_go_down(events: list[Observation]) -> None:
    state = ClassifierState()
    for obs in events:
        before = {(n, g): t.standing for n, gs in state.nodes.items() for g, t in gs.items()}
        state, decisions = classify(state, obs)
        assert decisions and decisions[0].at == obs.at
        for key, level in before.items():
            assert state.standing(*key) >= level  # an L4 GPU stays at L4 or above
        for d in decisions:
            assert d.standing >= d.level or d.duplicate


@settings(max_examples=200, deadline=None)
@given(sequences(ordered=True, span_s=900.0))
def test_dedup_never_acts_twice_on_one_event_within_the_window(
    events: list[Observation],
) -> None:
    rules = HealthRules()
    c = Classifier(rules)
    acted: dict[tuple[str, str, Kind, int | None, Level], float] = {}
    for obs in events:
        base = c.observe(obs)[0]
        key = (obs.node, obs.gpu_uuid, obs.kind, obs.xid, base.level)
        if not base.duplicate:
            if key in acted:
                assert obs.at - acted[key] > rules.dedup_s
            acted[key] = obs.at


@settings(max_examples=100, deadline=None)
@given(sequences(ordered=False, span_s=900.0))
def test_the_classifier_and_classify_agree(events: list[Observation]) -> None:
    c = Classifier()
    state = ClassifierState()
    for obs in events:
        state, expected = classify(state, obs)
        assert c.observe(obs) == expected
    assert c.state == state


@settings(max_examples=100, deadline=None)
@given(sequences(ordered=True))
def test_unknown_xids_always_fail_closed(events: list[Observation]) -> None:
    c = Classifier()
    for obs in events:
        base = c.observe(obs)[0]
        if obs.kind is Kind.XID and obs.xid not in load_catalog().entries:
            assert base.level is Level.L5 and base.cordon and base.evict == "none"
