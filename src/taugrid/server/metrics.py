"""The server's Prometheus metrics (docs/observability.md has the list and the alerts).

Two kinds, in one registry per app (never prometheus-client's global one: tests run
several apps in one process):

- instruments fed as things happen: the engine's committed transitions (admission wait,
  submit to running, restarts by failure class, runs finished), its pass time, and every
  API request's latency by route template (``server/metrics_http.py``);
- a collector that reads what is at scrape time: runs by state, workspace and queue, queue
  depth and the oldest queued run's wait, GPUs allocated and out of service, checkpoint
  age of the running runs, the GPU health monitor's counters and, on a cluster, how many
  nodes' agents report.

Label values are bounded: states, workspaces and queues (named by the policy, which an
admin writes), route templates, health levels, outcomes and kinds, failure classes. No
run id, user or other request input is ever a label: a run is found with ``tau status``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from taugrid import __version__
from taugrid.domain.gpu_use import GpuReading
from taugrid.domain.states import TERMINAL, RunState
from taugrid.ports.artifacts import ArtifactStore
from taugrid.store.runs import Move, Row, RunStore

S = RunState
# No *_created series: they double a scrape's size and no rule or dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]
# Waits in a queue: seconds to days.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
# An API request or an engine pass: a millisecond to seconds.
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# A running run's checkpoint age: minutes to a day.
CHECKPOINT_BUCKETS = (60, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400)
CHECKPOINT_TTL_S = 30.0  # a running run's checkpoints are listed at most this often
ACTIVE = (S.ADMITTED.value, S.RUNNING.value)


class HealthCounters(Protocol):
    """What a GPU health monitor counts (server/health.py, server/health_cluster.py)."""

    @property
    def decisions(self) -> Mapping[tuple[int, str, str], int]:
        """(level, outcome, the observation's kind) -> how many decisions."""

    @property
    def runs_stopped(self) -> int: ...


class ServerMetrics:
    """The instruments, and the collector reading the store (see the module)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.clock = clock
        r = self.registry
        self.admission_wait = Histogram(
            "taugrid_admission_wait_seconds",
            "Time from entering the queue to admission, per queue.",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.submit_to_running = Histogram(
            "taugrid_submit_to_running_seconds",
            "Time from submission to the first attempt running, per queue.",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.finished = Counter(
            "taugrid_runs_finished",
            "Runs that ended, by final state and queue.",
            ["state", "queue"],
            registry=r,
        )
        self.restarts = Counter(
            "taugrid_run_restarts",
            "Automatic restarts after a failed attempt, by failure class.",
            ["failure_class"],
            registry=r,
        )
        self.requests = Histogram(
            "taugrid_http_request_duration_seconds",
            "API request latency by method, route template and status class.",
            ["method", "route", "status"],
            buckets=FAST_BUCKETS,
            registry=r,
        )
        self.engine_pass = Histogram(
            "taugrid_engine_pass_seconds",
            "Wall time of one control-loop pass.",
            buckets=FAST_BUCKETS,
            registry=r,
        )
        # When each run re-entered its queue (a preemption, a restart), for its next
        # admission's wait; a run submitted straight into the queue waits from created_at.
        self._queued_at: dict[str, float] = {}

    def watch(
        self,
        store: RunStore,
        *,
        artifacts: ArtifactStore,
        machine_gpus: Callable[[], int | None],
        quarantined: Callable[[], int],
        health: HealthCounters | None,
        health_mode: str,
        agents: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        """Register the collector of what is at scrape time (once the stores exist)."""
        self.registry.register(
            _StateCollector(
                store,
                CheckpointAges(artifacts, self.clock),
                machine_gpus,
                quarantined,
                health,
                health_mode,
                agents,
                self.clock,
            )
        )

    def watch_gpu_use(
        self,
        latest: Callable[[], Mapping[int, GpuReading]],
        flagged: Callable[[], set[str]],
    ) -> None:
        """Register the GPU use collector (local mode with NVML: server/gpu_use.py)."""
        self.registry.register(_GpuUseCollector(latest, flagged))

    # -- fed by the engine ------------------------------------------------------------------
    def moved(self, moves: Iterable[tuple[Move, Row]]) -> None:
        """Each transition the engine committed, with the run as recorded after it."""
        for move, row in moves:
            to, queue, at = move.step.to, row["queue"], row["updated_at"]
            if to == S.QUEUED:
                self._queued_at[row["id"]] = at
            elif to == S.ADMITTED:
                since = self._queued_at.pop(row["id"], row["created_at"])
                self.admission_wait.labels(queue).observe(max(0.0, at - since))
            elif to == S.RUNNING and row["attempt_count"] == 1:
                self.submit_to_running.labels(queue).observe(max(0.0, at - row["created_at"]))
            elif to == S.RESTARTING:
                update = move.attempt_update or {}
                self.restarts.labels(update.get("failure_class") or "unknown").inc()
            if to in TERMINAL:
                self._queued_at.pop(row["id"], None)
                self.finished.labels(to.value.lower(), queue).inc()

    def engine_passed(self, seconds: float) -> None:
        self.engine_pass.observe(seconds)


class CheckpointAges:
    """How old each running run's newest checkpoint is, listing a run's checkpoints at most
    every ``CHECKPOINT_TTL_S`` (on object storage a listing is a request)."""

    def __init__(self, artifacts: ArtifactStore, clock: Callable[[], float]) -> None:
        self.artifacts = artifacts
        self.clock = clock
        self._newest: dict[str, tuple[float, float | None]] = {}  # run -> (listed at, newest)

    def newest(self, running: Sequence[str]) -> dict[str, float | None]:
        """Run id -> its newest checkpoint's time (None: it has none yet)."""
        now = self.clock()
        keep = set(running)
        for rid in [r for r in self._newest if r not in keep]:
            del self._newest[rid]  # ended: forgotten
        out: dict[str, float | None] = {}
        for rid in running:
            cached = self._newest.get(rid)
            if cached is None or now - cached[0] >= CHECKPOINT_TTL_S:
                try:
                    times = [c.time for c in self.artifacts.checkpoints(rid) if c.time]
                except OSError:
                    times = []
                cached = (now, max(times) if times else None)
                self._newest[rid] = cached
            out[rid] = cached[1]
        return out


class _StateCollector(Collector):
    def __init__(
        self,
        store: RunStore,
        checkpoints: CheckpointAges,
        machine_gpus: Callable[[], int | None],
        quarantined: Callable[[], int],
        health: HealthCounters | None,
        health_mode: str,
        agents: Callable[[], Mapping[str, int]] | None,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.checkpoints = checkpoints
        self.machine_gpus = machine_gpus
        self.quarantined = quarantined
        self.health = health
        self.health_mode = health_mode
        self.agents = agents
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        summary = self.store.summary()
        yield from _runs(summary, now)
        yield from self._gpus(summary)
        yield from self._checkpoint_ages(now)
        yield from self._health()
        info = GaugeMetricFamily("taugrid_build_info", "The server's version.", labels=["version"])
        info.add_metric([__version__], 1)
        yield info

    def _gpus(self, summary: list[Row]) -> Iterator[Metric]:
        gpus = GaugeMetricFamily(
            "taugrid_gpus",
            "GPUs: allocated to admitted or running runs, out of service (quarantined), "
            "and the machine's total (local mode).",
            labels=["state"],
        )
        gpus.add_metric(["allocated"], sum(r["gpus"] for r in summary if r["state"] in ACTIVE))
        gpus.add_metric(["quarantined"], self.quarantined())
        total = self.machine_gpus()
        if total is not None:
            gpus.add_metric(["total"], total)
        yield gpus

    def _checkpoint_ages(self, now: float) -> Iterator[Metric]:
        running = self.store.in_states([S.RUNNING], light=True)
        newest = self.checkpoints.newest([r["id"] for r in running])
        ages: dict[tuple[str, str], list[float]] = {}
        bare: dict[tuple[str, str], int] = {}
        for r in running:
            key = (r["workspace"], r["queue"])
            at = newest.get(r["id"])
            if at is None:
                bare[key] = bare.get(key, 0) + 1
            else:
                ages.setdefault(key, []).append(max(0.0, now - at))
        labels = ["workspace", "queue"]
        hist = HistogramMetricFamily(
            "taugrid_running_checkpoint_age_seconds",
            "Age of the newest checkpoint of each running run that has written one.",
            labels=labels,
        )
        oldest = GaugeMetricFamily(
            "taugrid_running_checkpoint_age_max_seconds",
            "The oldest newest-checkpoint among the running runs (the stalled-training "
            "signal: a run that checkpointed and stopped doing so).",
            labels=labels,
        )
        none = GaugeMetricFamily(
            "taugrid_running_without_checkpoint",
            "Running runs that have written no checkpoint yet.",
            labels=labels,
        )
        for key, values in sorted(ages.items()):
            hist.add_metric(list(key), _buckets(values, CHECKPOINT_BUCKETS), sum(values))
            oldest.add_metric(list(key), max(values))
        for key, n in sorted(bare.items()):
            none.add_metric(list(key), n)
        yield from (hist, oldest, none)

    def _health(self) -> Iterator[Metric]:
        mode = GaugeMetricFamily(
            "taugrid_health_monitoring",
            "The GPU health monitor's mode: 1 for the one in force (on, shadow, off).",
            labels=["mode"],
        )
        for m in ("on", "shadow", "off"):
            mode.add_metric([m], 1 if m == self.health_mode else 0)
        yield mode
        if self.health is None:
            return
        decisions = CounterMetricFamily(
            "taugrid_health_decisions",
            "GPU health decisions by level (0-5), outcome and the observation's kind.",
            labels=["level", "outcome", "kind"],
        )
        for (level, outcome, kind), n in sorted(dict(self.health.decisions).items()):
            decisions.add_metric([str(level), outcome, kind], n)
        yield decisions
        yield CounterMetricFamily(
            "taugrid_health_runs_stopped",
            "Runs stopped as hardware failures by the GPU health monitor.",
            value=self.health.runs_stopped,
        )
        evicted = getattr(self.health, "pods_evicted", None)
        if evicted is not None:
            yield CounterMetricFamily(
                "taugrid_health_pods_evicted",
                "Other owners' GPU pods evicted from faulty GPUs or nodes.",
                value=evicted,
            )
        if self.agents is not None:
            nodes = GaugeMetricFamily(
                "taugrid_health_agent_nodes",
                "Nodes by what their GPU health agent last said: reporting (within 2 min), "
                "silent (not since), unhealthy (a GPU or node fault standing).",
                labels=["status"],
            )
            for status, n in sorted(self.agents().items()):
                nodes.add_metric([status], n)
            yield nodes


class _GpuUseCollector(Collector):
    def __init__(
        self,
        latest: Callable[[], Mapping[int, GpuReading]],
        flagged: Callable[[], set[str]],
    ) -> None:
        self.latest = latest
        self.flagged = flagged

    def collect(self) -> Iterator[Metric]:
        util = GaugeMetricFamily(
            "taugrid_gpu_utilization_ratio",
            "Utilization (0-1) of each GPU a run holds, as last sampled.",
            labels=["gpu"],
        )
        memory = GaugeMetricFamily(
            "taugrid_gpu_memory_used_bytes",
            "Memory used on each GPU a run holds, as last sampled.",
            labels=["gpu"],
        )
        for index, r in sorted(self.latest().items()):
            util.add_metric([str(index)], r.utilization_pct / 100)
            memory.add_metric([str(index)], r.memory_used_bytes)
        idle = GaugeMetricFamily(
            "taugrid_runs_gpu_idle",
            "Running runs flagged by the policy's gpu_idle rule (their GPUs sit idle).",
            value=len(self.flagged()),
        )
        yield from (util, memory, idle)


def _runs(summary: list[Row], now: float) -> Iterator[Metric]:
    runs = GaugeMetricFamily(
        "taugrid_runs",
        "Runs by state, workspace and queue.",
        labels=["state", "workspace", "queue"],
    )
    for r in summary:
        runs.add_metric([r["state"].lower(), r["workspace"], r["queue"]], r["runs"])
    yield runs
    depth = GaugeMetricFamily(
        "taugrid_queue_depth", "Runs waiting in each queue.", labels=["queue"]
    )
    oldest = GaugeMetricFamily(
        "taugrid_queue_oldest_wait_seconds",
        "How long the longest-waiting queued run has waited since it was submitted.",
        labels=["queue"],
    )
    waiting: dict[str, list[Any]] = {}
    for r in summary:
        if r["state"] in (S.PENDING.value, S.QUEUED.value):
            n, first = waiting.get(r["queue"], [0, r["created_at"]])
            waiting[r["queue"]] = [n + r["runs"], min(first, r["created_at"])]
    for queue, (n, first) in sorted(waiting.items()):
        depth.add_metric([queue], n)
        oldest.add_metric([queue], max(0.0, now - first))
    yield from (depth, oldest)


def _buckets(values: Sequence[float], bounds: Sequence[float]) -> list[tuple[str, float]]:
    """Cumulative bucket counts as prometheus-client's HistogramMetricFamily takes them."""
    out = [(_bound(b), float(sum(1 for v in values if v <= b))) for b in bounds]
    out.append(("+Inf", float(len(values))))
    return out


def _bound(b: float) -> str:
    return str(float(b))
