"""The server's metrics fed by the real engine (on the fake executor, a real store) and read
back as Prometheus scrapes them: the waits, the ends and restarts, the run gauges, the
checkpoint age of running runs and the health counters."""

from __future__ import annotations

from collections import Counter
from typing import Any

from engine_world import World
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from taugrid.executors.local.artifacts import LocalArtifactStore
from taugrid.server.metrics import ServerMetrics


class Health:
    def __init__(self) -> None:
        self.decisions: Counter[tuple[int, str, str]] = Counter()
        self.runs_stopped = 0


def scrape(metrics: ServerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def watched(world: World, health: Any = None) -> ServerMetrics:
    world.store.clock = world.clock  # the rows' times on the test's clock
    metrics = ServerMetrics(clock=world.clock)
    world.engine.observe_moves(metrics.moved)
    world.engine.on_pass = metrics.engine_passed
    metrics.watch(
        world.store,
        artifacts=LocalArtifactStore(world.layout),
        machine_gpus=lambda: 2,
        quarantined=lambda: 1,
        health=health,
        health_mode="on" if health is not None else "off",
    )
    return metrics


def test_a_run_feeds_its_waits_its_end_and_the_gauges(world: World) -> None:
    metrics = watched(world)
    rid = world.submit(resources={"gpus": 1})
    world.clock.now += 5
    world.step()  # admitted after 5 s in the queue
    seen = scrape(metrics)
    q = (("queue", "default"),)
    assert seen[("taugrid_admission_wait_seconds_count", q)] == 1
    assert seen[("taugrid_admission_wait_seconds_sum", q)] == 5
    assert seen[("taugrid_admission_wait_seconds_bucket", (("le", "1.0"), *q))] == 0
    assert seen[("taugrid_admission_wait_seconds_bucket", (("le", "5.0"), *q))] == 1
    labels = (("queue", "default"), ("state", "admitted"), ("workspace", "default"))
    assert seen[("taugrid_runs", labels)] == 1
    assert seen[("taugrid_gpus", (("state", "allocated"),))] == 1
    assert seen[("taugrid_gpus", (("state", "total"),))] == 2
    assert seen[("taugrid_gpus", (("state", "quarantined"),))] == 1
    world.executor.start(world.key(rid))
    world.clock.now += 2
    world.step()
    seen = scrape(metrics)
    assert seen[("taugrid_submit_to_running_seconds_sum", q)] == 7
    # Running with no checkpoint yet; then one written 600 s ago.
    ws = (("queue", "default"), ("workspace", "default"))
    assert seen[("taugrid_running_without_checkpoint", ws)] == 1
    assert ("taugrid_running_checkpoint_age_max_seconds", ws) not in seen
    world.checkpoint(rid, 10, written_at=world.clock.now - 600)
    world.clock.now += 31  # the checkpoint listing is cached for 30 s
    seen = scrape(metrics)
    assert seen[("taugrid_running_checkpoint_age_max_seconds", ws)] == 631
    assert seen[("taugrid_running_checkpoint_age_seconds_bucket", (("le", "600.0"), *ws))] == 0
    assert seen[("taugrid_running_checkpoint_age_seconds_bucket", (("le", "1800.0"), *ws))] == 1
    assert ("taugrid_running_without_checkpoint", ws) not in seen
    world.executor.exit(world.key(rid), 0)
    world.step()
    seen = scrape(metrics)
    assert (
        seen[("taugrid_runs_finished_total", (("queue", "default"), ("state", "succeeded")))] == 1
    )
    assert seen[("taugrid_gpus", (("state", "allocated"),))] == 0
    assert ("taugrid_running_checkpoint_age_max_seconds", ws) not in seen
    assert seen[("taugrid_engine_pass_seconds_count", ())] == 0  # stepped by hand: no loop
    assert seen[("taugrid_health_monitoring", (("mode", "off"),))] == 1


def test_restarts_count_by_failure_class_and_a_requeue_waits_from_its_return(
    world: World,
) -> None:
    metrics = watched(world)
    rid = world.submit(restart={"max": 1, "on": ["error"], "backoff": "0s"})
    world.step()
    world.clock.now += 100
    world.executor.exit(world.key(rid), 3)
    world.step()  # backoff 0: requeued and admitted again in the same pass
    seen = scrape(metrics)
    assert seen[("taugrid_run_restarts_total", (("failure_class", "exit_code"),))] == 1
    q = (("queue", "default"),)
    assert seen[("taugrid_admission_wait_seconds_count", q)] == 2
    assert seen[("taugrid_admission_wait_seconds_sum", q)] == 0  # not 100: since requeued
    world.executor.exit(world.key(rid), 3)
    world.step()
    seen = scrape(metrics)
    assert seen[("taugrid_runs_finished_total", (("queue", "default"), ("state", "failed")))] == 1


def test_the_queue_depth_and_the_longest_wait(world: World) -> None:
    metrics = watched(world)
    for _ in range(3):
        world.submit(resources={"gpus": 2})
        world.clock.now += 10
    world.step()  # one admitted on the two GPUs, two wait
    seen = scrape(metrics)
    assert seen[("taugrid_queue_depth", (("queue", "default"),))] == 2
    assert seen[("taugrid_queue_oldest_wait_seconds", (("queue", "default"),))] == 20


def test_the_health_counters_are_exported_with_bounded_labels(world: World) -> None:
    health = Health()
    health.decisions[(3, "applied", "xid")] = 2
    health.decisions[(1, "recorded", "xid")] = 5
    health.runs_stopped = 4
    metrics = watched(world, health)
    seen = scrape(metrics)
    xid = (("kind", "xid"), ("level", "3"), ("outcome", "applied"))
    assert seen[("taugrid_health_decisions_total", xid)] == 2
    assert seen[("taugrid_health_runs_stopped_total", ())] == 4
    assert seen[("taugrid_health_monitoring", (("mode", "on"),))] == 1
    assert ("taugrid_health_pods_evicted_total", ()) not in seen  # local: none to evict
    assert not any("run" in k for _, labels in seen for k, _v in labels if k != "runs")
