"""deploy/helm: the core chart's observability objects, checked without a cluster.

The PrometheusRule is deploy/prometheus's rules file (``promtool check rules``), the
dashboards ConfigMap holds every deploy/grafana dashboard, the ServiceMonitors scrape the
jobs the rules name, and the chart's files/ are symlinks Helm follows into the package.
Nothing here talks to a cluster: docs/install.md says what was not run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import yaml
from chartkit import (
    CHART,
    DASHBOARDS,
    LINKS,
    MONITORING,
    RELEASE,
    RULES,
    ci,
    monitoring_problems,
    one,
    render,
    require_observability_files,
    run_helm,
    stderr_of,
)

from servicecheck import require_service


# -- observability ---------------------------------------------------------------------------
def test_prometheus_rule_is_the_rules_file(helm: str, chart: Path, tmp_path: Path) -> None:
    objs = render(helm, chart, ci("observability"))
    rule = one(objs, "PrometheusRule", RELEASE)
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitoring_problems(rule) == []
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    promtool = shutil.which("promtool")
    require_service(promtool is not None, "promtool is not installed (apt-get install prometheus)")
    assert promtool is not None
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    require_observability_files()
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    assert not [o for o in render(helm, chart, ci("default")) if o["kind"] == "PrometheusRule"]


def test_dashboards_configmap_holds_every_dashboard(helm: str, chart: Path) -> None:
    objs = render(helm, chart, ci("observability"))
    configmap = one(objs, "ConfigMap", f"{RELEASE}-dashboards")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    for text in configmap["data"].values():
        json.loads(text)
    require_observability_files()
    files = sorted(DASHBOARDS.glob("*.json"))
    assert sorted(configmap["data"]) == [p.name for p in files]
    for path in files:
        assert configmap["data"][path.name] == path.read_text()


def test_service_monitors_scrape_the_jobs_the_rules_name(helm: str, chart: Path) -> None:
    objs = render(helm, chart, ci("observability"))
    monitors = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert sorted(m["metadata"]["name"] for m in monitors) == [RELEASE, f"{RELEASE}-health-agent"]
    jobs = set()
    for monitor in monitors:
        assert monitoring_problems(monitor) == []
        selector = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [
            o
            for o in objs
            if o["kind"] == "Service" and selector.items() <= o["metadata"]["labels"].items()
        ]
        ports = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
        jobs.add(service["metadata"]["labels"][monitor["spec"]["jobLabel"]])
    assert jobs == {"taugrid", "taugrid-health-agent"}
    require_observability_files()
    named = set(re.findall(r'job="([^"]+)"', RULES.read_text()))
    assert named <= jobs, f"the rules name scrape jobs no ServiceMonitor makes: {named - jobs}"
    off = render(helm, chart, ci("default"))
    assert not [o for o in off if o["apiVersion"] == MONITORING]


def test_files_are_links_helm_follows_into_the_package(helm: str, tmp_path: Path) -> None:
    for name, target in LINKS.items():
        link = CHART / "files" / name
        assert link.is_symlink() and os.readlink(link) == target, link
    require_observability_files()
    done = run_helm(helm, "package", CHART, "--destination", tmp_path)
    assert done.returncode == 0, stderr_of(done)
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    with tarfile.open(tmp_path / f"taugrid-{version}.tgz") as tgz:
        names = set(tgz.getnames())
        rules = tgz.extractfile("taugrid/files/prometheus/taugrid.rules.yaml")
        assert rules is not None and rules.read() == RULES.read_bytes()
        for path in sorted(DASHBOARDS.glob("*.json")):
            member = tgz.extractfile(f"taugrid/files/grafana/{path.name}")
            assert member is not None and member.read() == path.read_bytes()
    assert not [n for n in names if n.startswith("taugrid/ci/")]  # .helmignore
