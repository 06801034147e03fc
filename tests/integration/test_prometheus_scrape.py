"""A real Prometheus (Debian's ``prometheus``; mandatory in CI) scraping a real TauGrid
server on loopback while real runs go through it, with TauGrid's alert rules loaded:
the series it stored are the ones the runs made, and every rule evaluates cleanly."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from tauproc import Tau

import promserver

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "taugrid.rules.yaml"


@pytest.fixture
def prometheus(tau: Tau, tmp_path: Path) -> Iterator[str]:
    tau.start_server()
    target = urlparse(tau.server_info()["url"]).netloc
    config = (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{RULES}]\n"
        "scrape_configs:\n"
        f"  - job_name: taugrid\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    with promserver.prometheus(config, tmp_path) as url:
        yield url


def query(prom: str, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def wait_for(prom: str, expr: str, want: float, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = query(prom, expr)
        except httpx.TransportError:  # still starting
            result = []
        if result and float(result[0]["value"][1]) == want:
            return result
        assert time.monotonic() < deadline, f"{expr}: {result}, wanted {want}"
        time.sleep(0.5)


def test_prometheus_scrapes_what_real_runs_did(tau: Tau, prometheus: str) -> None:
    for i in range(3):
        tau("run", "--wait", "--name", f"ok{i}", "--", "sh", "-c", "echo hi", check=True)
    assert tau("run", "--wait", "--name", "bad", "--", "sh", "-c", "exit 4").returncode == 4
    wait_for(prometheus, 'up{job="taugrid"}', 1)
    wait_for(prometheus, 'sum(taugrid_runs{state="succeeded"})', 3)
    wait_for(prometheus, 'sum(taugrid_runs_finished_total{state="failed"})', 1)
    wait_for(prometheus, "sum(taugrid_submit_to_running_seconds_count)", 4)
    (series,) = query(prometheus, 'taugrid_runs{state="failed"}')
    assert series["metric"]["workspace"] == "default" and series["metric"]["queue"] == "default"
    # The CLI's calls, timed by route: the run list and the runs' pages were asked for.
    routes = {
        r["metric"]["route"]
        for r in query(prometheus, "sum by (route) (taugrid_http_request_duration_seconds_count)")
    }
    assert {"/api/v1/runs", "/api/v1/runs/{ref}"} <= routes
    # Every TauGrid rule loaded and evaluates without an error against the real series.
    deadline = time.monotonic() + 30
    while True:
        groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.5)
    assert len(rules) == 11
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    firing = {r["name"] for r in rules if r["state"] != "inactive"}
    assert firing == set(), firing  # a healthy local server raises nothing
