"""The alert rules and the Grafana dashboards under deploy/ against what the code exports.

- Every metric a rule or a panel queries is one the server or the GPU health agent
  exports (names read from their registries, not from a list kept by hand), or
  Prometheus's own ``up``.
- The rules file passes ``promtool check rules`` and its unit tests pass ``promtool test
  rules`` (Debian's ``prometheus`` package; mandatory in CI), and every alert has a test.
- The dashboards are scripts/make-dashboards.py's output, each panel has a query, and every
  dashboard picks its Prometheus datasource through the ``datasource`` variable.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from servicecheck import require_service
from taugrid.domain.gpu_use import GpuReading
from taugrid.health.exporter import AgentMetrics
from taugrid.server.metrics import ServerMetrics
from taugrid.store import RunStore, connect

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "deploy" / "prometheus" / "taugrid.rules.yaml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "taugrid.rules.test.yaml"
DASHBOARDS = REPO / "deploy" / "grafana"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
PROMETHEUS_OWN = {"up"}


class _Health:
    decisions: Counter[tuple[int, str, str]] = Counter()
    runs_stopped = 0
    pods_evicted = 0


class _NoCheckpoints:
    def checkpoints(self, run_id: str) -> list[Any]:
        return []


def _series_names(registry: Any) -> set[str]:
    return {
        family.name + suffix
        for family in registry.collect()
        for suffix in SUFFIXES.get(family.type, ("",))
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    db = connect(f"sqlite:///{tmp_path_factory.mktemp('names') / 'tau.db'}")
    server = ServerMetrics()
    server.watch(
        RunStore(db),
        artifacts=_NoCheckpoints(),  # type: ignore[arg-type]
        machine_gpus=lambda: 8,
        quarantined=lambda: 0,
        health=_Health(),
        health_mode="on",
        agents=lambda: {"reporting": 1, "silent": 0, "unhealthy": 0},
    )
    server.watch_gpu_use(lambda: {0: GpuReading(0, 50.0, 1, 2)}, lambda: {"r"})
    names = _series_names(server.registry)
    db.dispose()
    agent = AgentMetrics([{"index": 0, "uuid": "GPU-0"}])
    return names | _series_names(agent.registry)


def _queried(expr: str) -> set[str]:
    """The metric names in a PromQL expression: label matchers and strings removed, what
    looks like a TauGrid series or Prometheus's own kept."""
    bare = re.sub(r'"[^"]*"', "", re.sub(r"\{[^}]*\}", "", expr))
    tokens = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare))
    return {t for t in tokens if t.startswith("taugrid_") or t in PROMETHEUS_OWN}


def _rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _panels() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            out.append((path.name, panel))
    return out


def test_every_rule_queries_only_exported_metrics(exported: set[str]) -> None:
    rules = _rules()
    assert len(rules) >= 11
    for rule in rules:
        names = _queried(rule["expr"])
        assert names, rule["alert"]
        assert names <= exported | PROMETHEUS_OWN, (rule["alert"], names - exported)


def test_every_panel_queries_only_exported_metrics(exported: set[str]) -> None:
    panels = _panels()
    assert {name for name, _ in panels} == {
        "taugrid-overview.json",
        "taugrid-queues.json",
        "taugrid-runs.json",
        "taugrid-gpu-health.json",
    }
    for name, panel in panels:
        assert panel["targets"], (name, panel["title"])
        for target in panel["targets"]:
            names = _queried(target["expr"])
            assert names, (name, panel["title"])
            assert names <= exported | PROMETHEUS_OWN, (name, panel["title"], names - exported)
            assert target["datasource"]["uid"] == "${datasource}"


def test_a_query_naming_a_metric_nobody_exports_is_caught(exported: set[str]) -> None:
    assert _queried('sum(rate(taugrid_runs_finishd_total{state="failed"}[5m]))') - exported


def test_the_dashboards_are_the_generators_output() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_dashboards", REPO / "scripts/make-dashboards.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = module.render()
    assert sorted(made) == sorted(p.name for p in DASHBOARDS.glob("*.json"))
    for name, text in made.items():
        assert (DASHBOARDS / name).read_text() == text, f"run scripts/make-dashboards.py ({name})"


def _promtool() -> str:
    tool = shutil.which("promtool")
    require_service(tool is not None, "promtool (Debian package prometheus) is not installed")
    assert tool is not None
    return tool


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run(
        [_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_promtool_unit_tests_cover_every_alert_and_pass() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    tested = {a["alertname"] for t in tests for a in t.get("alert_rule_test", [])}
    assert tested == {r["alert"] for r in _rules()}
    fired = {a["alertname"] for t in tests for a in t.get("alert_rule_test", []) if a["exp_alerts"]}
    assert fired == tested  # each is seen firing, not only staying quiet
    done = subprocess.run(
        [_promtool(), "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_fails_a_rule_whose_alert_does_not_fire(tmp_path: Path) -> None:
    """The unit tests can fail: the same tests against a rule with its threshold moved."""
    broken = RULES.read_text().replace(
        "taugrid_queue_oldest_wait_seconds > 3600", "taugrid_queue_oldest_wait_seconds > 36000"
    )
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    done = subprocess.run(
        [_promtool(), "test", "rules", RULE_TESTS.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "TauGridQueueWaitTooLong" in done.stdout + done.stderr
