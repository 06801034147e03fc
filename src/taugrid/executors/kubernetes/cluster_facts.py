"""What ``tau admin cluster check`` reads of a cluster (``ports.cluster_facts``): the API
server's version and discovery, the CustomResourceDefinitions, the admission webhook
configurations, the Deployments that look like Kueue's or KubeRay's controllers, the
nodes and the GPU health agents' pods, turned into ``domain.cluster_facts``.

Each read is on its own: one that fails (a 403 where the ServiceAccount lacks a grant,
a 404 for a kind the cluster does not have) leaves that fact None with the API's words
in ``errors``, and the verdict says what it could not check. Nothing is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from taugrid.domain.cluster_facts import (
    AgentPod,
    ClusterFacts,
    Controller,
    Crd,
    KubeVersion,
    Node,
    Webhook,
)
from taugrid.executors.kubernetes.client import JsonObject, KubeClient, KubeError
from taugrid.manifests.workloads import GPU_RESOURCE
from taugrid.ports.cluster_facts import ClusterInspector

log = logging.getLogger("taugrid.kubernetes")
T = TypeVar("T")

AGENT_LABELS = {"app.kubernetes.io/component": "health-agent"}
CONTROLLER_WORDS = ("kueue", "kuberay")  # Deployments kept as possible add-on controllers
WEBHOOK_KINDS = (
    ("mutating", "MutatingWebhookConfiguration"),
    ("validating", "ValidatingWebhookConfiguration"),
)
ADMISSION = "admissionregistration.k8s.io/v1"


class KubeClusterInspector(ClusterInspector):
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def facts(self) -> ClusterFacts:
        errors: dict[str, str] = {}

        def read(name: str, how: Callable[[], T]) -> T | None:
            try:
                return how()
            except KubeError as exc:
                errors[name] = exc.message
            except Exception as exc:  # a bug or a broken answer: say so, check the rest
                log.exception("cluster check: reading %s", name)
                errors[name] = f"{type(exc).__name__}: {exc}"
            return None

        return ClusterFacts(
            version=read("version", self._version),
            api_groups=read("api_groups", self._api_groups),
            crds=read("crds", self._crds),
            webhooks=read("webhooks", self._webhooks),
            controllers=read("controllers", self._controllers),
            nodes=read("nodes", self._nodes),
            agent_pods=read("agent_pods", self._agent_pods),
            errors=errors,
        )

    def _version(self) -> KubeVersion:
        v = self.client.server_version()
        return KubeVersion(
            str(v.get("major", "")), str(v.get("minor", "")), str(v.get("gitVersion", ""))
        )

    def _api_groups(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for group in self.client.api_groups().get("groups") or []:
            if isinstance(group, dict) and group.get("name"):
                versions = [v.get("version") for v in group.get("versions") or []]
                out[str(group["name"])] = tuple(str(v) for v in versions if v)
        return out

    def _crds(self) -> tuple[Crd, ...]:
        items = self.client.list("apiextensions.k8s.io/v1", "CustomResourceDefinition").items
        out = []
        for obj in items:
            spec = obj.get("spec") or {}
            served = tuple(
                str(v["name"])
                for v in spec.get("versions") or []
                if isinstance(v, dict) and v.get("served", True) and v.get("name")
            )
            names = spec.get("names") or {}
            out.append(
                Crd(
                    name=str(_meta(obj).get("name", "")),
                    group=str(spec.get("group", "")),
                    plural=str(names.get("plural", "")),
                    served=served,
                )
            )
        return tuple(out)

    def _webhooks(self) -> tuple[Webhook, ...]:
        out = []
        for word, kind in WEBHOOK_KINDS:
            for obj in self.client.list(ADMISSION, kind).items:
                services = []
                for hook in obj.get("webhooks") or []:
                    svc = ((hook or {}).get("clientConfig") or {}).get("service") or {}
                    if svc.get("name"):
                        services.append(f"{svc.get('namespace', '')}/{svc['name']}")
                name = str(_meta(obj).get("name", ""))
                out.append(Webhook(word, name, tuple(sorted(set(services)))))
        return tuple(out)

    def _controllers(self) -> tuple[Controller, ...]:
        out = []
        for obj in self.client.list("apps/v1", "Deployment").items:
            meta = _meta(obj)
            spec = obj.get("spec") or {}
            pod = (spec.get("template") or {}).get("spec") or {}
            images = tuple(
                str(c.get("image", "")) for c in pod.get("containers") or [] if isinstance(c, dict)
            )
            name = str(meta.get("name", ""))
            if not any(
                w in name.lower() or any(w in i.lower() for i in images) for w in CONTROLLER_WORDS
            ):
                continue
            replicas = spec.get("replicas")
            out.append(
                Controller(
                    namespace=str(meta.get("namespace", "")),
                    name=name,
                    images=images,
                    replicas=replicas if isinstance(replicas, int) else 1,
                    ready=_int((obj.get("status") or {}).get("readyReplicas")),
                )
            )
        return tuple(out)

    def _nodes(self) -> tuple[Node, ...]:
        out = []
        for obj in self.client.list("v1", "Node").items:
            meta = _meta(obj)
            allocatable = (obj.get("status") or {}).get("allocatable") or {}
            out.append(
                Node(
                    name=str(meta.get("name", "")),
                    labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
                    gpus=_int(allocatable.get(GPU_RESOURCE)),
                )
            )
        return tuple(out)

    def _agent_pods(self) -> tuple[AgentPod, ...]:
        out = []
        for obj in self.client.list("v1", "Pod", labels=dict(AGENT_LABELS)).items:
            meta = _meta(obj)
            status = obj.get("status") or {}
            conditions = status.get("conditions") or []
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in conditions
                if isinstance(c, dict)
            )
            waiting = ""
            for cs in status.get("containerStatuses") or []:
                reason = (((cs or {}).get("state") or {}).get("waiting") or {}).get("reason")
                if reason:
                    waiting = str(reason)
                    break
            out.append(
                AgentPod(
                    namespace=str(meta.get("namespace", "")),
                    name=str(meta.get("name", "")),
                    node=str((obj.get("spec") or {}).get("nodeName") or ""),
                    phase=str(status.get("phase", "")),
                    ready=ready,
                    waiting=waiting,
                )
            )
        return tuple(out)


def _meta(obj: JsonObject) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _int(value: object) -> int:
    """A count as the API writes it (``8``, ``"8"``); 0 for anything else."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    text = str(value or "").strip()
    return int(text) if text.isascii() and text.isdigit() else 0
