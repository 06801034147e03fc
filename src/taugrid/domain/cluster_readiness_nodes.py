"""The node half of ``tau admin cluster check``: does each flavor of the policy select a
node, is each GPU node selected by a flavor, and does a GPU health agent watch each GPU
node. Pure, over ``domain.cluster_facts``.

A flavor's ``nodeLabels`` are what Kueue puts in the pods' nodeSelector when it admits a
workload on that flavor, so a flavor matching no node admits runs whose pods never
schedule. A GPU node no flavor matches is never used by TauGrid (a warning: it may be
kept for other work). A GPU node without a reporting agent is one whose faults nobody
sees: its GPUs show as ``unknown`` in ``tau gpus``.
"""

from __future__ import annotations

from collections.abc import Mapping

from taugrid.domain.cluster_facts import AgentPod, AgentReports, ClusterFacts, Node, PolicyFacts
from taugrid.domain.cluster_readiness_types import FAIL, OK, WARN, Check, listed

AGENT_LABEL = "app.kubernetes.io/component=health-agent"


def matches(node: Node, labels: Mapping[str, str]) -> bool:
    """Whether ``node`` carries every one of ``labels`` (none: any node)."""
    return all(node.labels.get(k) == v for k, v in labels.items())


def _labels_text(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _nodes_unread(cluster: ClusterFacts, check: str) -> Check:
    return Check(
        check,
        FAIL,
        f"cannot list the nodes: {cluster.errors.get('nodes', 'no answer')}",
        "let the server's ServiceAccount list nodes",
    )


def flavor_checks(cluster: ClusterFacts, policy: PolicyFacts) -> list[Check]:
    """One line per flavor of the policy in force."""
    if not policy.flavors:
        return []
    if cluster.nodes is None:
        return [_nodes_unread(cluster, "flavor-nodes")]
    out = []
    for name, labels in policy.flavors.items():
        if not labels:
            out.append(Check("flavor", OK, "no nodeLabels: any node", subject=name))
            continue
        selector = _labels_text(labels)
        found = [n for n in cluster.nodes if matches(n, labels)]
        if not found:
            out.append(
                Check(
                    "flavor",
                    FAIL,
                    f"no node has the labels {selector}: runs admitted on it never schedule",
                    f"label its nodes (kubectl label node NODE {' '.join(selector.split(','))})"
                    f" or correct node_labels of flavor {name} in the policy",
                    subject=name,
                )
            )
        else:
            gpus = sum(n.gpus for n in found)
            out.append(
                Check(
                    "flavor",
                    OK,
                    f"{len(found)} node(s) with {selector} ({gpus} GPU(s))",
                    subject=name,
                )
            )
    return out


def gpu_nodes(cluster: ClusterFacts) -> list[Node]:
    return sorted((n for n in cluster.nodes or () if n.gpus > 0), key=lambda n: n.name)


def gpu_node_check(cluster: ClusterFacts, policy: PolicyFacts) -> Check:
    """The GPU nodes (allocatable ``nvidia.com/gpu`` > 0) that no flavor selects."""
    name = "gpu-nodes"
    if cluster.nodes is None:
        return _nodes_unread(cluster, name)
    gpu = gpu_nodes(cluster)
    if not gpu:
        return Check(
            name,
            WARN,
            "no node offers nvidia.com/gpu: runs asking for GPUs never start",
            "install the NVIDIA device plugin (or GPU operator) on the GPU nodes; ignore "
            "this on a CPU-only cluster",
        )
    flavors = list(policy.flavors.values())
    lost = [n for n in gpu if not any(matches(n, labels) for labels in flavors)]
    if lost:
        shown = listed(f"{n.name} ({n.gpus} GPUs)" for n in lost)
        return Check(
            name,
            WARN,
            f"GPU node(s) matched by no flavor: {shown}: TauGrid never places runs there",
            "add their labels to a flavor's node_labels in the policy, or leave them if "
            "they are kept for other work",
        )
    total = sum(n.gpus for n in gpu)
    return Check(name, OK, f"{len(gpu)} GPU node(s) ({total} GPUs), each matched by a flavor")


def agent_checks(cluster: ClusterFacts, agents: AgentReports, *, now: float) -> list[Check]:
    """Whether a health agent reports from each GPU node: one ok line, or one line per
    kind of trouble naming its nodes."""
    name = "health-agents"
    if agents.seen is None:
        return [
            Check(
                name,
                WARN,
                "GPU health is off on this server: agents' reports are refused and no GPU "
                "node is watched",
                "start the server with --health on (TAU_HEALTH=on)",
            )
        ]
    if cluster.nodes is None:
        return [_nodes_unread(cluster, name)]
    nodes = gpu_nodes(cluster)
    if not nodes:
        return [Check(name, OK, "no GPU node to watch")]
    seen = agents.seen
    stale = agents.stale_s
    silent = [n.name for n in nodes if now - seen.get(n.name, float("-inf")) > stale]
    if not silent:
        return [Check(name, OK, f"an agent reports from each of the {len(nodes)} GPU node(s)")]
    pods: dict[str, list[AgentPod]] = {}
    for pod in cluster.agent_pods or ():
        pods.setdefault(pod.node, []).append(pod)
    no_pod, down, quiet = [], [], []
    for node in silent:
        mine = pods.get(node, [])
        running = [p for p in mine if p.phase == "Running" and p.ready]
        if running:
            quiet.append(node)
        elif mine:
            down.append(mine[0])
        else:
            no_pod.append(node)
    out = []
    mins = int(stale // 60)
    if cluster.agent_pods is None:
        why = cluster.errors.get("agent_pods", "no answer")
        out.append(
            Check(
                name,
                FAIL,
                f"no agent report for over {mins} min from {listed(silent)} (and cannot list "
                f"the agents' pods: {why})",
                "let the server's ServiceAccount list pods; check the agent DaemonSet "
                f"(kubectl get pods -A -l {AGENT_LABEL} -o wide)",
            )
        )
        return out
    if no_pod:
        out.append(
            Check(
                name,
                FAIL,
                f"no health agent pod on GPU node(s) {listed(no_pod)}",
                "the agent DaemonSet must run on every GPU node: check its nodeSelector and "
                f"tolerations (kubectl get daemonsets -A -l {AGENT_LABEL})",
            )
        )
    for pod in down:
        state = pod.waiting or pod.phase or "not ready"
        out.append(
            Check(
                name,
                FAIL,
                f"the agent pod {pod.namespace}/{pod.name} on {pod.node} is not running ({state})",
                f"kubectl -n {pod.namespace} describe pod {pod.name}; "
                f"kubectl -n {pod.namespace} logs {pod.name}",
            )
        )
    if quiet:
        words = [_last_word(n, seen, now) for n in quiet]
        out.append(
            Check(
                name,
                FAIL,
                f"agents run on {listed(words)} but have not reported for over {mins} min",
                "read their logs (kubectl logs POD): the agent's token (an agent account's) "
                "or the server URL it reports to is wrong, or the server is unreachable "
                "from the node",
            )
        )
    return out


def _last_word(node: str, seen: Mapping[str, float], now: float) -> str:
    at = seen.get(node)
    if at is None:
        return f"{node} (never)"
    return f"{node} (last {_ago(now - at)} ago)"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    return f"{int(seconds // 3600)} h"
