"""The GPU health agent's own metrics (taugrid/health/exporter.py): per-GPU health from the
same classifier the server runs, the observations by kind, whether reports get through;
fed by a real agent round on a replay file and served over real HTTP."""

from __future__ import annotations

import json
import socket
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from taugrid.health.exporter import AgentMetrics
from taugrid.health.replay import ReplaySource
from taugrid.healthagent import Agent, Sender

GPUS = [{"index": 0, "uuid": "GPU-0"}, {"index": 1, "uuid": "GPU-1"}]
LINES = [
    {"kind": "xid", "gpu_uuid": "GPU-0", "at": 1796000000.0, "xid": 79, "source": "kmsg"},
    {"kind": "xid", "gpu_uuid": "GPU-1", "at": 1796000001.0, "xid": 13, "source": "kmsg"},
    {"kind": "thermal", "gpu_uuid": "GPU-1", "at": 1796000002.0, "value": 95},
]


def scrape(
    metrics: AgentMetrics, port: int | None = None
) -> dict[tuple[str, tuple[Any, ...]], float]:
    if port is None:
        from prometheus_client import generate_latest

        text = generate_latest(metrics.registry).decode()
    else:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_a_round_of_the_agent_sets_each_gpus_level_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "drill.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in LINES))
    sent: list[dict[str, Any]] = []
    failures = [OSError("refused")]

    def post(url: str, data: bytes, headers: dict[str, str], timeout: float) -> dict[str, Any]:
        if failures:
            raise failures.pop()
        sent.append(json.loads(data))
        return {"node": "gpu-1", "level": 3, "healthy": False, "reason": "Xid 79"}

    metrics = AgentMetrics(GPUS)
    assert scrape(metrics)[("taugrid_agent_gpu_health_level", (("gpu", "0"),))] == 0
    agent = Agent(
        "gpu-1",
        [ReplaySource(path, node="gpu-1")],
        Sender("http://tau:8080", "t", post=post),
        gpus=GPUS,
        metrics=metrics,
    )
    assert agent.read() == 3
    assert not agent.report()  # the server is away: kept, counted as failed
    seen = scrape(metrics)
    assert seen[("taugrid_agent_gpu_health_level", (("gpu", "0"),))] == 3  # Xid 79: the node
    assert seen[("taugrid_agent_gpu_health_level", (("gpu", "1"),))] == 1  # Xid 13: the job
    assert seen[("taugrid_agent_gpu_observations_total", (("gpu", "1"), ("kind", "xid")))] == 1
    assert seen[("taugrid_agent_gpu_observations_total", (("gpu", "1"), ("kind", "thermal")))] == 1
    assert seen[("taugrid_agent_reports_total", (("result", "failed"),))] == 1
    assert seen[("taugrid_agent_pending_observations", ())] == 3
    assert seen[("taugrid_agent_last_report_timestamp_seconds", ())] == 0
    assert agent.report() and len(sent[0]["observations"]) == 3
    seen = scrape(metrics)
    assert seen[("taugrid_agent_reports_total", (("result", "sent"),))] == 1
    assert seen[("taugrid_agent_pending_observations", ())] == 0
    assert seen[("taugrid_agent_last_report_timestamp_seconds", ())] > 1.7e9
    assert seen[("taugrid_agent_gpu_info", (("gpu", "1"), ("uuid", "GPU-1")))] == 1


def test_a_gpu_keeps_its_worst_level_and_a_node_reading_has_its_own_label() -> None:
    from taugrid.domain.health import Observation

    metrics = AgentMetrics(GPUS)
    metrics.observed(Observation("xid", "GPU-0", "gpu-1", 1.0, xid=79, source="kmsg"))
    metrics.observed(Observation("thermal", "GPU-0", "gpu-1", 2.0, value=95))
    metrics.observed(Observation("gpu_missing", "", "gpu-1", 3.0, value=1))
    seen = scrape(metrics)
    assert seen[("taugrid_agent_gpu_health_level", (("gpu", "0"),))] == 3  # not lowered
    assert (
        seen[("taugrid_agent_gpu_observations_total", (("gpu", "node"), ("kind", "gpu_missing")))]
        == 1
    )


def test_the_metrics_are_served_over_http() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    metrics = AgentMetrics(GPUS)
    metrics.serve(port, host="127.0.0.1")
    seen = scrape(metrics, port)
    assert seen[("taugrid_agent_gpu_info", (("gpu", "0"), ("uuid", "GPU-0")))] == 1
