"""deploy/helm: the core chart's pod security, checked without a cluster.

Every pod but the GPU health agent's is restricted (and the server writes only TAU_HOME and
/tmp); the agent gets exactly its documented privileges, runs on GPU nodes, tolerates the
server's taint and carries the labels `tau admin cluster check` looks for.
Nothing here talks to a cluster: docs/install.md says what was not run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from chartkit import (
    CHART,
    CI_FILES,
    RELEASE,
    Obj,
    ci,
    dockerfile,
    env_of,
    one,
    pods_of,
    render,
    server_container,
)

from taugrid.manifests.plan import DEFAULT_SERVER_URL


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
