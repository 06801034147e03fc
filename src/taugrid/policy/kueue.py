"""A policy as Kueue v1beta2 objects (plus a Namespace per workspace) for a cluster.

Field names follow the v1beta2 CRDs in ``shared/k8s-schemas/kueue/`` (``cohortName``,
not v1beta1's ``cohort``). Quantities are strings in canonical form, computed from the
same integers the local scheduler uses, so both modes enforce the same numbers. Each
cluster queue becomes one resource group covering the resources its flavors set (the
policy checks make every flavor of a queue set the same ones), in the order
``nvidia.com/gpu``, ``cpu``, ``memory``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

from taugrid.domain.quota import Resource
from taugrid.errors import UsageError
from taugrid.policy.domain import to_domain
from taugrid.policy.models import NAME_MAX, Flavor, Policy
from taugrid.policy.quantities import format_cpu, format_memory

API_VERSION = "kueue.x-k8s.io/v1beta2"
MANAGED_BY = {"taugrid.io/managed-by": "taugrid"}
WORKSPACE_LABEL = "taugrid.io/workspace"
GPU_TYPE_ANNOTATION = "taugrid.io/gpu-type"
RESOURCE_NAMES: dict[Resource, str] = {"gpu": "nvidia.com/gpu", "cpu": "cpu", "memory": "memory"}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _format(resource: Resource, value: int) -> str:
    if resource == "cpu":
        return format_cpu(value)
    if resource == "memory":
        return format_memory(value)
    return str(value)


def _meta(
    name: str, namespace: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {**(labels or {}), **MANAGED_BY}
    return meta


def namespace_for(workspace: str, namespace_prefix: str = "") -> str:
    """The namespace of a workspace; raises UsageError when it is not a valid name."""
    name = namespace_prefix + workspace
    if len(name) > NAME_MAX or not _DNS_LABEL.fullmatch(name):
        raise UsageError(
            f"namespace {name!r} (prefix {namespace_prefix!r} + workspace {workspace!r}) is not "
            f"a DNS-1123 label: lowercase letters, digits and '-', at most {NAME_MAX} characters"
        )
    return name


def _flavor(flavor: Flavor) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if flavor.node_labels:
        spec["nodeLabels"] = dict(flavor.node_labels)
    if flavor.taints:
        spec["nodeTaints"] = [t.model_dump(exclude_none=True) for t in flavor.taints]
        if flavor.tolerate_taints:
            spec["tolerations"] = [
                {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
                if t.value is not None
                else {"key": t.key, "operator": "Exists", "effect": t.effect}
                for t in flavor.taints
            ]
    meta = _meta(flavor.name)
    if flavor.gpu_type is not None:
        meta["annotations"] = {GPU_TYPE_ANNOTATION: flavor.gpu_type}
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": meta, "spec": spec}


def render_kueue(policy: Policy, namespace_prefix: str = "") -> list[dict[str, Any]]:
    """Every object a cluster needs for ``policy``, in apply order.

    ResourceFlavors, Cohorts, ClusterQueues, Namespaces (one per workspace, named
    ``namespace_prefix + workspace``), LocalQueues, WorkloadPriorityClasses; each group in
    policy order, every object labelled ``taugrid.io/managed-by: taugrid``.
    """
    namespaces = {ws.name: namespace_for(ws.name, namespace_prefix) for ws in policy.workspaces}
    domain = to_domain(policy)
    objects: list[dict[str, Any]] = [_flavor(f) for f in policy.flavors]
    objects += [
        {"apiVersion": API_VERSION, "kind": "Cohort", "metadata": _meta(c.name), "spec": {}}
        for c in policy.cohorts
    ]
    for cq in policy.cluster_queues:
        queue = domain.queues[cq.name]
        covered = [r for r in RESOURCE_NAMES if any(r in fq.resources for fq in queue.flavors)]
        flavors = []
        for fq in queue.flavors:
            resources = []
            for r in covered:
                q = fq.resources[r]
                entry = {"name": RESOURCE_NAMES[r], "nominalQuota": _format(r, q.nominal)}
                if q.borrowing_limit is not None:
                    entry["borrowingLimit"] = _format(r, q.borrowing_limit)
                if q.lending_limit is not None:
                    entry["lendingLimit"] = _format(r, q.lending_limit)
                resources.append(entry)
            flavors.append({"name": fq.flavor, "resources": resources})
        spec: dict[str, Any] = {}
        if cq.cohort is not None:
            spec["cohortName"] = cq.cohort
        spec["namespaceSelector"] = {}
        spec["queueingStrategy"] = cq.queueing_strategy
        spec["preemption"] = {
            "withinClusterQueue": cq.preemption.within_cluster_queue,
            "reclaimWithinCohort": cq.preemption.reclaim_within_cohort,
        }
        spec["resourceGroups"] = [
            {"coveredResources": [RESOURCE_NAMES[r] for r in covered], "flavors": flavors}
        ]
        objects.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ClusterQueue",
                "metadata": _meta(cq.name),
                "spec": spec,
            }
        )
    objects += [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": _meta(namespaces[ws.name], labels={WORKSPACE_LABEL: ws.name}),
        }
        for ws in policy.workspaces
    ]
    objects += [
        {
            "apiVersion": API_VERSION,
            "kind": "LocalQueue",
            "metadata": _meta(lq.name, namespaces[ws.name], {WORKSPACE_LABEL: ws.name}),
            "spec": {"clusterQueue": lq.cluster_queue},
        }
        for ws in policy.workspaces
        for lq in ws.local_queues
    ]
    for pc in policy.priority_classes:
        wpc: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": _meta(pc.name),
            "value": pc.value,
        }
        if pc.description:
            wpc["description"] = pc.description
        objects.append(wpc)
    return objects


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    """Objects as one multi-document YAML stream (``---`` before each), keys in order."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.explicit_start = True
    yaml.default_flow_style = False
    yaml.width = 4096  # long descriptions stay on one line
    out = io.StringIO()
    yaml.dump_all(list(objects), out)
    return out.getvalue()
