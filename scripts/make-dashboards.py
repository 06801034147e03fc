#!/usr/bin/env python3
"""Writes TauGrid's Grafana dashboards (deploy/grafana/*.json) from the panel lists below.

Run it after changing a panel: `python3 scripts/make-dashboards.py`. The JSON is what
Grafana imports (schemaVersion 39, a Prometheus datasource chosen by the `datasource`
variable); the chart ships it in a ConfigMap labelled for Grafana's dashboard sidecar.
tests/unit/observability/test_dashboards.py checks the files are this script's output and
that every query names only metrics TauGrid exports.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "deploy" / "grafana"
DS = {"type": "prometheus", "uid": "${datasource}"}

# (title, kind, unit, [(expr, legend)]); kind: timeseries | stat | table | bargauge
Panel = tuple[str, str, str, list[tuple[str, str]]]


def quantile(q: float, histogram: str, by: str, window: str) -> str:
    """The q-quantile of a histogram's buckets, per ``by`` (``le`` is added)."""
    keep = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({keep}) (rate({histogram}_bucket[{window}])))"


FAILED_ENDED = 'increase(taugrid_runs_finished_total{state="failed"}[1h])'
ERRORS_5XX = 'rate(taugrid_http_request_duration_seconds_count{status="5xx"}[5m])'

DASHBOARDS: dict[str, tuple[str, list[Panel]]] = {
    "taugrid-overview": (
        "TauGrid / Overview",
        [
            ("Running runs", "stat", "short", [('sum(taugrid_runs{state="running"})', "running")]),
            ("Queued runs", "stat", "short", [("sum(taugrid_queue_depth)", "queued")]),
            ("GPUs allocated", "stat", "short", [('sum(taugrid_gpus{state="allocated"})', "")]),
            (
                "GPUs out of service",
                "stat",
                "short",
                [('sum(taugrid_gpus{state="quarantined"})', "quarantined")],
            ),
            (
                "GPU health monitoring",
                "stat",
                "short",
                [("taugrid_health_monitoring == 1", "{{mode}}")],
            ),
            (
                "Runs by state",
                "timeseries",
                "short",
                [("sum by (state) (taugrid_runs)", "{{state}}")],
            ),
            (
                "Runs ended per hour",
                "timeseries",
                "short",
                [("sum by (state) (increase(taugrid_runs_finished_total[1h]))", "{{state}}")],
            ),
            (
                "Restarts per hour by failure class",
                "timeseries",
                "short",
                [
                    (
                        "sum by (failure_class) (increase(taugrid_run_restarts_total[1h]))",
                        "{{failure_class}}",
                    )
                ],
            ),
            (
                "API latency p99 by route",
                "timeseries",
                "s",
                [
                    (
                        quantile(0.99, "taugrid_http_request_duration_seconds", "route", "5m"),
                        "{{route}}",
                    )
                ],
            ),
            (
                "API server errors",
                "timeseries",
                "reqps",
                [
                    (
                        f"sum by (route) ({ERRORS_5XX})",
                        "{{route}}",
                    )
                ],
            ),
            (
                "Engine pass p99",
                "timeseries",
                "s",
                [
                    (
                        quantile(0.99, "taugrid_engine_pass_seconds", "", "5m"),
                        "p99",
                    )
                ],
            ),
            ("Server version", "stat", "short", [("taugrid_build_info", "{{version}}")]),
        ],
    ),
    "taugrid-queues": (
        "TauGrid / Queues",
        [
            ("Queue depth", "timeseries", "short", [("taugrid_queue_depth", "{{queue}}")]),
            (
                "Longest wait in queue",
                "timeseries",
                "s",
                [("taugrid_queue_oldest_wait_seconds", "{{queue}}")],
            ),
            (
                "Admission wait p50 / p95",
                "timeseries",
                "s",
                [
                    (
                        quantile(0.5, "taugrid_admission_wait_seconds", "queue", "15m"),
                        "p50 {{queue}}",
                    ),
                    (
                        quantile(0.95, "taugrid_admission_wait_seconds", "queue", "15m"),
                        "p95 {{queue}}",
                    ),
                ],
            ),
            (
                "Submit to running p95",
                "timeseries",
                "s",
                [
                    (
                        quantile(0.95, "taugrid_submit_to_running_seconds", "queue", "15m"),
                        "{{queue}}",
                    )
                ],
            ),
            (
                "Runs by queue and state",
                "table",
                "short",
                [("sum by (queue, state) (taugrid_runs)", "")],
            ),
        ],
    ),
    "taugrid-runs": (
        "TauGrid / Runs",
        [
            (
                "Running by workspace",
                "timeseries",
                "short",
                [('sum by (workspace) (taugrid_runs{state="running"})', "{{workspace}}")],
            ),
            (
                "Oldest newest checkpoint of a running run",
                "timeseries",
                "s",
                [
                    (
                        "taugrid_running_checkpoint_age_max_seconds",
                        "{{workspace}}/{{queue}}",
                    )
                ],
            ),
            (
                "Running runs without a checkpoint",
                "timeseries",
                "short",
                [("taugrid_running_without_checkpoint", "{{workspace}}/{{queue}}")],
            ),
            (
                "Checkpoint age of running runs (share under 30 min)",
                "timeseries",
                "percentunit",
                [
                    (
                        'sum(taugrid_running_checkpoint_age_seconds_bucket{le="1800.0"}) '
                        "/ sum(taugrid_running_checkpoint_age_seconds_count)",
                        "fresh",
                    )
                ],
            ),
            (
                "GPU utilization of held GPUs (local mode)",
                "timeseries",
                "percentunit",
                [("taugrid_gpu_utilization_ratio", "GPU {{gpu}}")],
            ),
            (
                "GPU memory used of held GPUs (local mode)",
                "timeseries",
                "bytes",
                [("taugrid_gpu_memory_used_bytes", "GPU {{gpu}}")],
            ),
            (
                "Runs flagged for idle GPUs",
                "timeseries",
                "short",
                [("taugrid_runs_gpu_idle", "idle")],
            ),
            (
                "Failure share of ended runs (1h)",
                "timeseries",
                "percentunit",
                [
                    (
                        f"sum by (queue) ({FAILED_ENDED}) "
                        "/ sum by (queue) (increase(taugrid_runs_finished_total[1h]))",
                        "{{queue}}",
                    )
                ],
            ),
        ],
    ),
    "taugrid-gpu-health": (
        "TauGrid / GPU health",
        [
            (
                "Monitoring mode",
                "stat",
                "short",
                [("taugrid_health_monitoring == 1", "{{mode}}")],
            ),
            (
                "GPUs out of service",
                "stat",
                "short",
                [('sum(taugrid_gpus{state="quarantined"})', "")],
            ),
            (
                "Nodes by agent status",
                "bargauge",
                "short",
                [("taugrid_health_agent_nodes", "{{status}}")],
            ),
            (
                "Decisions per hour by level and outcome",
                "timeseries",
                "short",
                [
                    (
                        "sum by (level, outcome) (increase(taugrid_health_decisions_total[1h]))",
                        "L{{level}} {{outcome}}",
                    )
                ],
            ),
            (
                "Runs stopped and pods evicted per hour",
                "timeseries",
                "short",
                [
                    ("increase(taugrid_health_runs_stopped_total[1h])", "runs stopped"),
                    ("increase(taugrid_health_pods_evicted_total[1h])", "pods evicted"),
                ],
            ),
            (
                "Worst health level per GPU (agents)",
                "table",
                "short",
                [("max by (instance, gpu) (taugrid_agent_gpu_health_level)", "")],
            ),
            (
                "Agent observations per hour by kind",
                "timeseries",
                "short",
                [
                    (
                        "sum by (kind) (increase(taugrid_agent_gpu_observations_total[1h]))",
                        "{{kind}}",
                    )
                ],
            ),
            (
                "Agents: seconds since the server took a report",
                "table",
                "s",
                [("time() - taugrid_agent_last_report_timestamp_seconds", "")],
            ),
            (
                "Agent scrape up",
                "table",
                "short",
                [('up{job="taugrid-health-agent"}', "")],
            ),
        ],
    ),
}


def dashboard(uid: str, title: str, panels: list[Panel]) -> dict[str, Any]:
    out = []
    x = y = 0
    for i, (name, kind, unit, queries) in enumerate(panels):
        w, h = (6, 4) if kind == "stat" else (12, 8)
        if x + w > 24:
            x, y = 0, y + 8
        out.append(
            {
                "id": i + 1,
                "type": kind,
                "title": name,
                "datasource": DS,
                "gridPos": {"x": x, "y": y, "w": w, "h": h},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                # Missing data is shown as such ("No data"), never as a reassuring zero.
                "options": {"reduceOptions": {"calcs": ["lastNotNull"]}}
                if kind in ("stat", "bargauge")
                else {},
                "targets": [
                    {
                        "refId": chr(ord("A") + j),
                        "datasource": DS,
                        "expr": expr,
                        "legendFormat": legend,
                        **({"format": "table", "instant": True} if kind == "table" else {}),
                    }
                    for j, (expr, legend) in enumerate(queries)
                ],
            }
        )
        x += w
    return {
        "uid": uid,
        "title": title,
        "tags": ["taugrid"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                }
            ]
        },
        "panels": out,
    }


def render() -> dict[str, str]:
    """File name -> JSON text, for every dashboard."""
    return {
        f"{uid}.json": json.dumps(dashboard(uid, title, panels), indent=2) + "\n"
        for uid, (title, panels) in DASHBOARDS.items()
    }


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
