"""The GPU health agent's own Prometheus metrics (``tau health agent --metrics-port N``):
per-GPU health as this node sees it, and whether its reports reach the server.

Each observation goes through the same classifier the server runs (``domain.health``,
state kept in place), so a GPU's level here is the level the server acts on; the server
stays the one that acts. Labels are bounded: a GPU's index on the node (``node`` for a
reading about the node as a whole), the observation kinds, the report results.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    start_http_server,
)

from taugrid.domain.health import Observation
from taugrid.domain.health.classify import Classifier

NODE_LABEL = "node"
disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: none reads them


class AgentMetrics:
    def __init__(self, gpus: Sequence[dict[str, Any]]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self._index = {str(g["uuid"]): str(g["index"]) for g in gpus}
        self._classifier = Classifier()
        self._worst: dict[str, int] = {}
        self.level = Gauge(
            "taugrid_agent_gpu_health_level",
            "The worst GPU health level (0 healthy .. 5) observed on each GPU since the agent "
            "started; a person's return resets it on the server, a restart of the agent here.",
            ["gpu"],
            registry=r,
        )
        self.faults = Counter(
            "taugrid_agent_gpu_observations",
            "Health observations read from NVML and the kernel log, by GPU and kind.",
            ["gpu", "kind"],
            registry=r,
        )
        self.reports = Counter(
            "taugrid_agent_reports",
            "Reports to the server by result (sent, failed: kept for the next one).",
            ["result"],
            registry=r,
        )
        self.pending = Gauge(
            "taugrid_agent_pending_observations",
            "Observations read and not yet taken by the server.",
            registry=r,
        )
        self.last_report = Gauge(
            "taugrid_agent_last_report_timestamp_seconds",
            "When the server last took a report (Unix time).",
            registry=r,
        )
        self.info = Gauge(
            "taugrid_agent_gpu_info",
            "The node's GPUs as NVML lists them (1 each).",
            ["gpu", "uuid"],
            registry=r,
        )
        for g in gpus:
            self.info.labels(str(g["index"]), str(g["uuid"])).set(1)
            self.level.labels(str(g["index"])).set(0)
        for result in ("sent", "failed"):
            self.reports.labels(result)

    def observed(self, obs: Observation) -> None:
        gpu = self._index.get(obs.gpu_uuid, NODE_LABEL) if obs.gpu_uuid else NODE_LABEL
        self.faults.labels(gpu, obs.kind.value).inc()
        level = max((int(d.level) for d in self._classifier.observe(obs)), default=0)
        if level > self._worst.get(gpu, 0):  # the gauge keeps the worst level seen
            self._worst[gpu] = level
            self.level.labels(gpu).set(level)

    def reported(self, sent: bool, pending: int) -> None:
        self.reports.labels("sent" if sent else "failed").inc()
        self.pending.set(pending)
        if sent:
            self.last_report.set(time.time())

    def serve(self, port: int, host: str = "0.0.0.0") -> None:  # Prometheus scrapes the pod
        start_http_server(port, addr=host, registry=self.registry)
