"""GPU use of running runs (server/gpu_use.py) on the real engine, store and admission, with
NVML read through the real adapter (taugrid/health/usage.py) over the scriptable fake NVML
module: what the API shows, what ``tau metrics`` gets, the policy's idle flag (an event)
and stop (the run ends CANCELLED, saying why), the metrics; a busy GPU and a GPU that
cannot be read are never idle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from engine_world import World, make_world
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from taugrid.domain.gpu_use import IdleAction, IdleRule
from taugrid.health.usage import NvmlUsage
from taugrid.server.gpu_use import GpuUseTracker, local_places
from taugrid.server.metrics import ServerMetrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "health"))
from fake_nvml import FakeGpu, FakeNvml

GIB = 1 << 30


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1")])


def tracker(world: World, nvml: FakeNvml, rule: IdleRule) -> GpuUseTracker:
    world.store.clock = world.clock
    return GpuUseTracker(
        NvmlUsage(nvml),
        local_places(world.store.gpu_holders),
        lambda: rule,
        world.store,
        world.engine,
        interval_s=15.0,
        clock=world.clock,
    )


def running(world: World, gpus: int = 1) -> str:
    rid = world.submit(resources={"gpus": gpus})
    world.step()
    world.executor.start(world.key(rid))
    world.step()
    assert world.state(rid) == "RUNNING"
    return rid


def rounds(world: World, t: GpuUseTracker, n: int) -> None:
    for _ in range(n):
        world.clock.now += 15
        t.sample()


def test_a_busy_run_shows_its_use_and_is_never_flagged(world: World, nvml: FakeNvml) -> None:
    rid = running(world, gpus=2)
    nvml.gpus[0].utilization, nvml.gpus[0].memory_used = 97, 30 * GIB
    nvml.gpus[1].utilization, nvml.gpus[1].memory_used = 3, 1 * GIB
    t = tracker(world, nvml, IdleRule(5.0, 600.0, IdleAction.STOP))
    rounds(world, t, 60)
    now = t.of(rid)
    assert now is not None
    assert now["utilization_pct"] == 97 and now["memory_used_bytes"] == 31 * GIB
    assert [g["utilization_pct"] for g in now["gpus"]] == [97, 3]
    assert now["idle_since"] is None and not now["flagged_idle"]
    assert len(t.series(rid)) == 60 and t.series(rid)[-1]["utilization_pct"] == 97
    assert "GpuIdle" not in [r for _, r in world.reasons(rid)]
    assert world.state(rid) == "RUNNING"


def test_an_idle_run_is_flagged_once_then_a_busy_gpu_clears_it(
    world: World, nvml: FakeNvml
) -> None:
    rid = running(world)
    t = tracker(world, nvml, IdleRule(5.0, 600.0, IdleAction.FLAG))
    rounds(world, t, 40)  # 585 s idle: not yet
    assert "GpuIdle" not in [r for _, r in world.reasons(rid)]
    rounds(world, t, 10)
    idle_events = [e for e in world.store.events(rid) if e["reason"] == "GpuIdle"]
    assert len(idle_events) == 1  # once per idle stretch
    assert "under 5% utilization for 10 min" in idle_events[0]["message"]
    assert t.flagged() == {rid} and world.state(rid) == "RUNNING"  # flag: it goes on
    nvml.gpus[0].utilization = 80
    rounds(world, t, 1)
    assert t.flagged() == set() and t.of(rid)["idle_since"] is None  # type: ignore[index]


def test_the_policy_can_stop_an_idle_run(world: World, nvml: FakeNvml) -> None:
    rid = running(world)
    t = tracker(world, nvml, IdleRule(5.0, 300.0, IdleAction.STOP))
    rounds(world, t, 21)
    world.step()
    world.step()
    run = world.run(rid)
    assert run["state"] == "CANCELLED", world.reasons(rid)
    assert any(e["reason"] == "GpuIdle" for e in world.store.events(rid)), (
        "the stop says why, as an event"
    )
    rounds(world, t, 3)  # the run is gone from the GPUs: no second stop, no sample
    assert t.of(rid) is None


def test_a_gpu_nvml_cannot_read_is_not_idle(world: World, nvml: FakeNvml) -> None:
    rid = running(world)
    nvml.gpus[0].errors["nvmlDeviceGetUtilizationRates"] = 15  # GPU is lost
    t = tracker(world, nvml, IdleRule(5.0, 300.0, IdleAction.STOP))
    rounds(world, t, 40)
    assert t.of(rid) is None and t.flagged() == set()
    assert world.state(rid) == "RUNNING"


def test_the_metrics_show_each_held_gpu_and_the_flagged_runs(
    tmp_path: Path, nvml: FakeNvml
) -> None:
    world = make_world(tmp_path, gpus=2)
    running(world, gpus=1)
    nvml.gpus[0].utilization, nvml.gpus[0].memory_used = 0, 2 * GIB
    t = tracker(world, nvml, IdleRule(5.0, 60.0, IdleAction.FLAG))
    metrics = ServerMetrics(clock=world.clock)
    metrics.watch_gpu_use(t.latest_by_gpu, t.flagged)
    rounds(world, t, 6)
    text = generate_latest(metrics.registry).decode()
    seen = {
        (s.name, tuple(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert seen[("taugrid_gpu_utilization_ratio", (("gpu", "0"),))] == 0
    assert seen[("taugrid_gpu_memory_used_bytes", (("gpu", "0"),))] == 2 * GIB
    assert 'gpu="1"' not in text  # not held: not sampled
    assert seen[("taugrid_runs_gpu_idle", ())] == 1
    world.store.engine.dispose()
