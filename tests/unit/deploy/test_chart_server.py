"""deploy/helm: the server the core chart runs, checked without a cluster.

The server agrees with the image (command, port, TAU_HOME) and with the code (its flags,
the environment it reads), and connects to the bundled PostgreSQL or to an external
database given by URL or by Secret; the pre-upgrade migration Job.
Nothing here talks to a cluster: docs/install.md says what was not run.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from chartkit import (
    CHART,
    NAMESPACE,
    RELEASE,
    REPO,
    Obj,
    ci,
    dockerfile,
    env_of,
    one,
    problems_of,
    render,
    server_container,
)
from sqlalchemy.engine import make_url

from servicecheck import require_service
from taugrid import __version__
from taugrid.manifests.plan import DEFAULT_HELPER_IMAGE, DEFAULT_SERVER_URL
from taugrid.manifests.workloads import DEFAULT_UID


# -- the server ------------------------------------------------------------------------------
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


def test_an_upgrade_migrates_first_in_a_hook_job(helm: str, chart: Path) -> None:
    """The pre-upgrade Job runs the server's --migrate-only on the server's database, with
    the server's image and a restricted pod; without migrations.hook there is none."""
    for values in ("default", "external-db"):
        objs = render(helm, chart, ci(values))
        hooks = [o for o in objs if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
        (job,) = hooks
        assert job["kind"] == "Job" and job["metadata"]["annotations"]["helm.sh/hook"] == (
            "pre-upgrade"
        )
        pod = job["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        server = server_container(objs)
        assert container["image"] == server["image"]
        assert container["command"] == ["python", "-m", "taugrid.server", "--migrate-only"]
        assert env_of(container)["TAU_DATABASE_URL"] == env_of(server)["TAU_DATABASE_URL"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["restartPolicy"] == "Never"
        assert problems_of(job) == []
    off = render(helm, chart, ci("default"), sets=("migrations.hook=false",))
    assert not [o for o in off if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
    assert "--migrate-only" in (REPO / "src/taugrid/server/__main__.py").read_text()
