"""The idle-GPU rule (domain/gpu_use.py): when a run's GPUs count as idle, when it is
flagged (once per stretch) and stopped; gaps and missing readings never make it idle."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from taugrid.domain.gpu_use import (
    GpuReading,
    IdleAction,
    IdleRule,
    UseSample,
    holders_to_runs,
    idle_verdict,
    sample_of,
)

RULE = IdleRule(below_pct=5.0, after_s=600.0, action=IdleAction.FLAG)
GAP = 45.0


def samples(utils: list[float], start: float = 0.0, every: float = 15.0) -> list[UseSample]:
    return [UseSample(start + i * every, u, 0, 0, ()) for i, u in enumerate(utils)]


def test_a_run_is_the_busiest_of_its_gpus() -> None:
    got = sample_of(10.0, [GpuReading(1, 0.0, 1 << 30, 80 << 30), GpuReading(0, 90.0, 2, 80)])
    assert got is not None
    assert (got.utilization_pct, got.memory_used_bytes) == (90.0, (1 << 30) + 2)
    assert [g.index for g in got.gpus] == [0, 1]
    assert sample_of(10.0, []) is None  # nothing read: no sample, never an idle one


def test_idle_for_the_whole_window_flags_once_and_a_busy_sample_restarts_it() -> None:
    idle = samples([0.0] * 41)  # 0 .. 600 s, every 15 s
    assert idle_verdict(idle[:40], RULE, 585.0, max_gap_s=GAP, flagged=False).flag is False
    v = idle_verdict(idle, RULE, 600.0, max_gap_s=GAP, flagged=False)
    assert (v.idle_since, v.flag, v.stop) == (0.0, True, False)
    assert idle_verdict(idle, RULE, 600.0, max_gap_s=GAP, flagged=True).flag is False
    busy = [*idle, UseSample(615.0, 50.0, 0, 0, ())]
    assert idle_verdict(busy, RULE, 615.0, max_gap_s=GAP, flagged=True).idle_since is None
    again = [*busy, *samples([1.0] * 3, start=630.0)]
    assert idle_verdict(again, RULE, 660.0, max_gap_s=GAP, flagged=False).idle_since == 630.0


def test_the_threshold_is_strict_and_stop_is_the_policys() -> None:
    at_threshold = samples([5.0] * 41)
    assert idle_verdict(at_threshold, RULE, 600.0, max_gap_s=GAP, flagged=False).idle_since is None
    stop = IdleRule(5.0, 600.0, IdleAction.STOP)
    v = idle_verdict(samples([4.9] * 41), stop, 600.0, max_gap_s=GAP, flagged=False)
    assert v.flag and v.stop
    off = IdleRule(5.0, 600.0, IdleAction.OFF)
    assert (
        idle_verdict(samples([0.0] * 41), off, 600.0, max_gap_s=GAP, flagged=False).idle_since
        is None
    )


def test_a_gap_in_the_readings_restarts_the_stretch() -> None:
    before = samples([0.0] * 20)  # 0 .. 285 s
    after = samples([0.0] * 21, start=400.0)  # a reader that failed for 115 s
    v = idle_verdict([*before, *after], RULE, 700.0, max_gap_s=GAP, flagged=False)
    assert v.idle_since == 400.0 and not v.flag
    # Readings that stopped coming are not idleness either.
    assert (
        idle_verdict(samples([0.0] * 41), RULE, 700.0, max_gap_s=GAP, flagged=False).idle_since
        is None
    )


def test_holders_become_each_runs_gpus() -> None:
    assert holders_to_runs({3: ["a"], 1: ["a", "b"], 0: []}) == {"a": [1, 3], "b": [1]}


@given(st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=80))
def test_a_busy_sample_inside_the_window_never_flags(utils: list[float]) -> None:
    series = samples(utils)
    now = series[-1].at
    v = idle_verdict(series, RULE, now, max_gap_s=GAP, flagged=False)
    window = [s for s in series if s.at >= now - RULE.after_s]
    if any(s.utilization_pct >= RULE.below_pct for s in window) or now < RULE.after_s:
        assert not v.flag
    if v.flag:
        assert all(s.utilization_pct < RULE.below_pct for s in series if s.at >= v.idle_since)
