"""How busy a run's GPUs are, and when a run whose GPUs sit idle is flagged or stopped.
Pure: readings in, a verdict out (``server/gpu_use.py`` samples and applies it).

A reading is one GPU's utilization (NVML's "percent of time a kernel ran" over the last
sample period) and memory at one time. A run's sample is the busiest of its GPUs at that
time: a run is idle only when every GPU it holds is. The rule, like dstack's utilization
policy: a run whose GPUs stayed under ``below_pct`` for ``after_s`` is flagged once (an
event and a metric, hence an alert), and stopped when the policy says ``stop``. Missing
readings never count as idle: the idle stretch must be covered by samples up to now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class IdleAction(StrEnum):
    OFF = "off"  # not watched
    FLAG = "flag"  # an event and the metric; the run goes on
    STOP = "stop"  # flagged, then stopped (it ends CANCELLED, the event says why)


@dataclass(frozen=True)
class IdleRule:
    below_pct: float = 5.0
    after_s: float = 1800.0
    action: IdleAction = IdleAction.FLAG


@dataclass(frozen=True)
class GpuReading:
    index: int
    utilization_pct: float
    memory_used_bytes: int
    memory_total_bytes: int


@dataclass(frozen=True)
class UseSample:
    """A run's GPUs at one time: the busiest one's utilization, the memory of all."""

    at: float
    utilization_pct: float
    memory_used_bytes: int
    memory_total_bytes: int
    gpus: tuple[GpuReading, ...]


def sample_of(at: float, readings: Sequence[GpuReading]) -> UseSample | None:
    """The run's sample from its GPUs' readings; None when there is none to go by."""
    if not readings:
        return None
    return UseSample(
        at,
        max(r.utilization_pct for r in readings),
        sum(r.memory_used_bytes for r in readings),
        sum(r.memory_total_bytes for r in readings),
        tuple(sorted(readings, key=lambda r: r.index)),
    )


@dataclass(frozen=True)
class IdleVerdict:
    idle_since: float | None  # the start of the current idle stretch; None: busy or unknown
    flag: bool = False  # flag it now (it was not flagged in this stretch)
    stop: bool = False  # stop it now


def idle_verdict(
    samples: Sequence[UseSample],
    rule: IdleRule,
    now: float,
    *,
    max_gap_s: float,
    flagged: bool,
) -> IdleVerdict:
    """What the rule says of a run given its samples (oldest first) at ``now``.

    The idle stretch is the trailing run of samples under the threshold with no gap over
    ``max_gap_s`` between them (nor between the last one and now): a reader that failed
    for a while restarts the stretch instead of extending it."""
    if rule.action is IdleAction.OFF or not samples:
        return IdleVerdict(None)
    if now - samples[-1].at > max_gap_s or samples[-1].utilization_pct >= rule.below_pct:
        return IdleVerdict(None)
    since = samples[-1].at
    for earlier in reversed(samples[:-1]):
        if earlier.utilization_pct >= rule.below_pct or since - earlier.at > max_gap_s:
            break
        since = earlier.at
    if now - since < rule.after_s:
        return IdleVerdict(since)
    return IdleVerdict(since, flag=not flagged, stop=rule.action is IdleAction.STOP)


def idle_words(rule: IdleRule, since: float, now: float) -> str:
    minutes = (now - since) / 60
    return (
        f"its GPUs have been under {rule.below_pct:g}% utilization for {minutes:.0f} min "
        f"(the policy's gpu_idle: {rule.action.value} after {rule.after_s / 60:g} min)"
    )


def holders_to_runs(holders: Mapping[int, Sequence[str]]) -> dict[str, list[int]]:
    """GPU index -> runs holding it, turned into run -> its GPU indices (sorted)."""
    out: dict[str, list[int]] = {}
    for index, runs in holders.items():
        for run in runs:
            out.setdefault(run, []).append(index)
    return {run: sorted(gpus) for run, gpus in out.items()}
