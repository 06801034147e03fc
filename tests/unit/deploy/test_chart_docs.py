"""deploy/helm: what the install tells the user, checked without a cluster.

The chart's NOTES.txt says how to log in and start the agents (commands that parse as
shell), and docs/install.md covers the install, names only values that exist and says
what was not run.
Nothing here talks to a cluster: docs/install.md says what was not run.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from chartkit import (
    CHART,
    DOC,
    KUBERAY_VERSION,
    KUEUE_VERSION,
    NAMESPACE,
    RELEASE,
    ci,
    run_helm,
    stderr_of,
)


# -- NOTES.txt -------------------------------------------------------------------------------
def notes(helm: str, chart: Path, *values: Path) -> str:
    cmd: list[str | Path] = ["install", RELEASE, chart, "-n", NAMESPACE, "--dry-run=client"]
    for path in values:
        cmd += ["-f", path]
    done = run_helm(helm, *cmd)
    assert done.returncode == 0, stderr_of(done)
    return done.stdout.split("\nNOTES:\n", 1)[1]


def test_notes_say_how_to_log_in_and_start_the_agents(helm: str, chart: Path) -> None:
    text = notes(helm, chart, ci("multi-workspace"))
    assert f"kubectl -n {NAMESPACE} port-forward svc/{RELEASE} 18000:8000" in text
    assert f"exec deploy/{RELEASE} -c server -- cat /var/lib/taugrid/admin-token" in text
    assert "--token-stdin" in text and 'tau login "$TAU_URL"' in text
    assert "tau admin workspace add-member team-a alice --role researcher" in text
    assert "tau admin token create --user alice" in text
    assert "tau admin user add health-agent --agent" in text
    secret = f"{RELEASE}-health-agent-token"
    assert f"create secret generic {secret} --from-file=token=" in text
    assert "pod-security.kubernetes.io/enforce=privileged" in text
    ingress = notes(helm, chart, ci("external-db"))
    assert "export TAU_URL=https://tau.example.org" in ingress
    assert "health-agent" not in notes(helm, chart, ci("health-off"))
    # Every command the notes give parses as shell.
    for block in re.findall(r"(?m)^ {5}(\S.*(?:\n {7}.*)*)", text):
        done = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
        assert done.returncode == 0, block


# -- docs ------------------------------------------------------------------------------------
def values_paths(node: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}{key}"
            yield path
            yield from values_paths(value, f"{path}.")


def test_install_doc_covers_the_install_and_says_what_was_not_run() -> None:
    doc = DOC.read_text()
    head = doc[:2500].lower()
    assert "not run" in head and "cluster" in head  # said plainly, at the top
    for needed_text in (
        "helm install",
        "helm upgrade",
        "helm uninstall",
        "kind create cluster",
        "scripts/package-chart.sh",
        "taugrid-stack",
        "rbac.workspaceScoped",
        "CAP_SYSLOG",
        "privileged",
        "/dev/kmsg",
        "/var/lib/kubelet/pod-resources",
        "pod-security.kubernetes.io/enforce",
        f"Kueue {KUEUE_VERSION}",
        f"KubeRay {KUBERAY_VERSION}",
        "TAU_POLICY_FILE",
        "admin-token",
    ):
        assert needed_text in doc, needed_text
    known = set(values_paths(yaml.safe_load((CHART / "values.yaml").read_text())))
    tops = {p for p in known if "." not in p}
    for path in re.findall(r"`([a-zA-Z]+(?:\.[a-zA-Z]+)+)`", doc):
        if path.split(".")[0] in tops:
            assert path in known, f"docs/install.md names {path}, not in values.yaml"
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", doc, re.S):
        done = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
        assert done.returncode == 0, f"{done.stderr}\n{block}"
