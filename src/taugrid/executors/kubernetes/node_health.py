"""What the GPU health controller does to a cluster's nodes (``domain.health.effects.
node_effects`` decides it): cordon with TauGrid's taint, evict pods through the Eviction
API, and uncordon, but only nodes TauGrid cordoned itself.

- **Cordon**: ``spec.unschedulable`` and the ``NoSchedule`` taint
  ``taugrid.io/gpu-unhealthy=<reason>`` (the node's other taints kept), with the
  annotation ``taugrid.io/cordoned-by: taugrid``: the marker that lets TauGrid uncordon
  it later, and never a node a person or another tool cordoned.
- **Evict**: ``POST pods/<pod>/eviction``, so PodDisruptionBudgets are respected. The
  API's 429 (a budget says not now) is retried after 10 s, doubling to 2 min, until the
  deadline; a pod already gone counts as evicted. The clock and the sleep are injected.
- **Uncordon**: only with the marker (what the person's ``return`` asks for): the taint,
  the flag and the marker go.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from taugrid.executors.kubernetes.client import (
    Conflict,
    KubeClient,
    KubeError,
    NotFound,
    ObjectRef,
    TooManyRequests,
)
from taugrid.manifests.workloads import GPU_RESOURCE, MANAGED_BY
from taugrid.ports.health import PodOnNode

log = logging.getLogger("taugrid.health")

TAINT_KEY = "taugrid.io/gpu-unhealthy"
CORDONED_BY = "taugrid.io/cordoned-by"
CORDON_REASON = "taugrid.io/cordon-reason"
RUN_LABEL = "taugrid.io/run-id"
CONDITION = "GPUHealthy"  # the node condition TauGrid keeps (node-problem-detector style)
EVICT_FIRST_WAIT_S = 10.0
EVICT_MAX_WAIT_S = 120.0
EVICT_DEADLINE_S = 600.0


def _node(name: str) -> ObjectRef:
    return ObjectRef("v1", "Node", None, name)


def _taint_value(reason: str) -> str:
    """A label value: 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric."""
    cleaned = re.sub(r"[^A-Za-z0-9._]+", "-", reason).strip("._-")[:63]
    return cleaned.strip("._-") or "fault"


class KubeNodeActuator:
    def __init__(
        self,
        client: KubeClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self._clock = clock
        self._sleep = sleep

    def gpu_nodes(self) -> list[str]:
        """The nodes that offer GPUs (the breaker's fleet)."""
        out = []
        for node in self.client.list("v1", "Node").items:
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            if str(allocatable.get(GPU_RESOURCE, "0")) not in ("", "0"):
                out.append(node["metadata"]["name"])
        return sorted(out)

    def cordoned_by_taugrid(self) -> set[str]:
        """Every node carrying TauGrid's cordon marker."""
        return {
            node["metadata"]["name"]
            for node in self.client.list("v1", "Node").items
            if (node["metadata"].get("annotations") or {}).get(CORDONED_BY) == "taugrid"
        }

    def cordoned_by_us(self, name: str) -> bool:
        node = self.client.get(_node(name))
        return (node["metadata"].get("annotations") or {}).get(CORDONED_BY) == "taugrid"

    def cordon(self, name: str, reason: str) -> bool:
        """Cordon and taint; False when TauGrid had cordoned it already."""
        node = self.client.get(_node(name))
        meta, spec = node["metadata"], node.get("spec") or {}
        ours = (meta.get("annotations") or {}).get(CORDONED_BY) == "taugrid"
        if spec.get("unschedulable") and not ours:
            # Cordoned by someone else: add the taint, but leave their cordon theirs.
            self.client.patch(_node(name), {"spec": {"taints": self._with_taint(spec, reason)}})
            return False
        if ours:
            return False
        self.client.patch(
            _node(name),
            {
                "metadata": {"annotations": {CORDONED_BY: "taugrid", CORDON_REASON: reason}},
                "spec": {"unschedulable": True, "taints": self._with_taint(spec, reason)},
            },
        )
        return True

    def set_condition(self, name: str, healthy: bool, reason: str, message: str) -> bool:
        """The node's ``GPUHealthy`` condition (others' conditions kept: the list is
        written whole with the version read, retried on a conflict); False when it
        already said so."""
        for _ in range(5):
            node = self.client.get(_node(name))
            status = node.get("status") or {}
            conditions = list(status.get("conditions") or [])
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            value = "True" if healthy else "False"
            had = next((c for c in conditions if c.get("type") == CONDITION), None)
            if had is not None and had.get("status") == value and had.get("reason") == reason:
                return False
            mine = {
                "type": CONDITION,
                "status": value,
                "reason": reason,
                "message": message[:1024],
                "lastHeartbeatTime": now,
                "lastTransitionTime": (
                    had.get("lastTransitionTime", now)
                    if had is not None and had.get("status") == value
                    else now
                ),
            }
            conditions = [c for c in conditions if c.get("type") != CONDITION] + [mine]
            version = node["metadata"].get("resourceVersion")
            patch: dict[str, Any] = {"status": {"conditions": conditions}}
            if version:
                patch["metadata"] = {"resourceVersion": version}
            try:
                self.client.patch(_node(name), patch, subresource="status")
                return True
            except Conflict:
                continue  # the kubelet wrote its own conditions meanwhile: read again
        raise Conflict(f"node {name}'s conditions kept changing; {CONDITION} not set")

    def uncordon(self, name: str) -> bool:
        """Undo TauGrid's cordon; False (nothing changed) on a node it did not cordon."""
        node = self.client.get(_node(name))
        if (node["metadata"].get("annotations") or {}).get(CORDONED_BY) != "taugrid":
            return False
        taints = [
            t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT_KEY
        ]
        self.client.patch(
            _node(name),
            {
                "metadata": {"annotations": {CORDONED_BY: None, CORDON_REASON: None}},
                "spec": {"unschedulable": None, "taints": taints or None},
            },
        )
        return True

    def _with_taint(self, spec: dict[str, Any], reason: str) -> list[dict[str, Any]]:
        taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
        return [*taints, {"key": TAINT_KEY, "value": _taint_value(reason), "effect": "NoSchedule"}]

    def pods_on(self, name: str) -> list[PodOnNode]:
        """Every pod bound to the node, with the GPUs it asked for and its run (if ours)."""
        pods = self.client.list("v1", "Pod", None).items
        out = []
        for p in pods:
            spec = p.get("spec") or {}
            if spec.get("nodeName") != name:
                continue
            meta = p["metadata"]
            labels = meta.get("labels") or {}
            ours = all(labels.get(k) == v for k, v in MANAGED_BY.items())
            out.append(
                PodOnNode(
                    meta.get("namespace") or "",
                    meta["name"],
                    meta.get("uid") or "",
                    pod_gpus(spec),
                    labels.get(RUN_LABEL, "") if ours else "",
                )
            )
        return sorted(out, key=lambda p: (p.namespace, p.name))

    def evict(self, namespace: str, pod: str, deadline_s: float = EVICT_DEADLINE_S) -> bool:
        """Evict, waiting out PodDisruptionBudgets until the deadline; True once gone."""
        return evict_pod(
            self.client, namespace, pod, deadline_s, clock=self._clock, sleep=self._sleep
        )


def pod_gpus(spec: dict[str, Any]) -> int:
    total = 0
    for c in spec.get("containers") or []:
        limits = (c.get("resources") or {}).get("limits") or {}
        try:
            total += int(str(limits.get(GPU_RESOURCE, "0")))
        except ValueError:
            continue
    return total


def evict_pod(
    client: KubeClient,
    namespace: str,
    pod: str,
    deadline_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Evict through the Eviction API: a 429 (a PodDisruptionBudget says not now) is
    retried after 10 s, doubling to 2 min, until ``deadline_s``; True once the pod is
    gone (one already gone counts), False when refused to the end or on another error."""
    start, wait = clock(), EVICT_FIRST_WAIT_S
    while True:
        try:
            client.evict(namespace, pod)
            return True
        except NotFound:
            return True
        except TooManyRequests as exc:
            if clock() - start + wait > deadline_s:
                log.warning(
                    "GPU health: eviction of %s/%s still refused: %s", namespace, pod, exc.message
                )
                return False
            sleep(max(wait, exc.retry_after or 0.0))
            wait = min(wait * 2, EVICT_MAX_WAIT_S)
        except KubeError as exc:
            log.warning("GPU health: cannot evict %s/%s: %s", namespace, pod, exc.message)
            return False
