"""deploy/helm: the core chart's values, checked without a cluster.

Bad values fail naming the value (the chart's own checks and values.schema.json, which is
draft-07 and closed, and types the policy as TauGrid's policy models do); the policy given
in the values is the server's policy file (or an existing ConfigMap is).
Nothing here talks to a cluster: docs/install.md says what was not run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartkit import (
    CHART,
    RELEASE,
    REPO,
    Obj,
    ci,
    env_of,
    one,
    render,
    render_error,
    server_container,
)

from taugrid.policy import load_policy_text


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
