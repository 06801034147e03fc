"""The Kubernetes API as the rest of TauGrid sees it: a small protocol, plain data, one error tree.

Everything above this module (the executor, the informers, the admission source) talks to
a cluster through :class:`KubeClient`, so tests can put an in-memory fake behind it and the
real adapter (``lightkube_client.LightkubeClient``) stays the only code that speaks HTTP.
Objects cross the interface as JSON-shaped dicts, exactly as the API server sends them:
no client library's model classes, which drop fields they do not know and coerce types.

The one table of kinds TauGrid touches (``KINDS``) lives here too, as plain data, so a fake
and the real client agree on which kinds exist, their plurals and whether they are
namespaced.

Errors: every failure is a :class:`KubeError` (a ``TauError``) naming the verb, the kind,
``namespace/name`` and the API server's own message, on one line. A Secret's data or a
bearer token never appears in one: messages carry only what the server said, and a
Secret's ``Invalid value`` is redacted.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from taugrid.errors import TauError

FIELD_MANAGER = "taugrid"
"""The server-side-apply field manager of everything TauGrid applies."""

JsonObject = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


@dataclass(frozen=True)
class KindInfo:
    plural: str
    namespaced: bool


# (apiVersion, kind) -> where it lives. Built-in kinds match lightkube-models; the CRDs
# match shared/k8s-schemas (Kueue v0.19 v1beta2, KubeRay v1). A test checks both.
KINDS: dict[tuple[str, str], KindInfo] = {
    ("v1", "Namespace"): KindInfo("namespaces", namespaced=False),
    ("v1", "Node"): KindInfo("nodes", namespaced=False),
    ("v1", "Service"): KindInfo("services", namespaced=True),
    ("v1", "Pod"): KindInfo("pods", namespaced=True),
    ("v1", "Secret"): KindInfo("secrets", namespaced=True),
    ("v1", "Event"): KindInfo("events", namespaced=True),
    ("batch/v1", "Job"): KindInfo("jobs", namespaced=True),
    ("ray.io/v1", "RayJob"): KindInfo("rayjobs", namespaced=True),
    ("ray.io/v1", "RayCluster"): KindInfo("rayclusters", namespaced=True),
    ("kueue.x-k8s.io/v1beta2", "Workload"): KindInfo("workloads", namespaced=True),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): KindInfo("localqueues", namespaced=True),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): KindInfo("clusterqueues", namespaced=False),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): KindInfo("resourceflavors", namespaced=False),
    ("kueue.x-k8s.io/v1beta2", "Cohort"): KindInfo("cohorts", namespaced=False),
    ("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass"): KindInfo(
        "workloadpriorityclasses", namespaced=False
    ),
    # Read by `tau admin cluster check` (cluster_facts.py): the add-ons' CRDs, webhooks
    # and controllers.
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): KindInfo(
        "customresourcedefinitions", namespaced=False
    ),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): KindInfo(
        "mutatingwebhookconfigurations", namespaced=False
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): KindInfo(
        "validatingwebhookconfigurations", namespaced=False
    ),
    ("apps/v1", "Deployment"): KindInfo("deployments", namespaced=True),
    # A workspace Namespace's RoleBinding of the workspace ClusterRole (policy_sync.py,
    # only with TAU_WORKSPACE_CLUSTERROLE).
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): KindInfo("rolebindings", namespaced=True),
}


def kind_info(api_version: str, kind: str) -> KindInfo:
    try:
        return KINDS[(api_version, kind)]
    except KeyError:
        raise KubeError(f"unsupported kind {kind} ({api_version}): not in KINDS") from None


@dataclass(frozen=True)
class ObjectRef:
    """Which object: ``namespace`` is None for cluster-scoped kinds."""

    api_version: str
    kind: str
    namespace: str | None
    name: str

    @classmethod
    def of(cls, obj: JsonObject) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(str(obj["apiVersion"]), str(obj["kind"]), meta.get("namespace"), meta["name"])

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    object: JsonObject


@dataclass(frozen=True)
class ObjectList:
    items: list[JsonObject]
    resource_version: str | None


class WatchStream(Iterator[WatchEvent], Protocol):
    """What ``watch`` returns: the events, and ``close()``, which may be called from any
    thread and makes a ``next()`` blocked on the network end promptly (StopIteration).
    A generator satisfies the shape; a real client must make ``close`` thread-safe."""

    def close(self) -> None: ...


class KubeClient(Protocol):
    """The Kubernetes API TauGrid uses. All methods block (callers run them on threads).

    Which calls are retried is the implementation's business, with one rule: ``create`` is
    never retried after a request may have reached the server (its answer may be lost after
    it happened); the caller re-reads instead. ``get``, ``list``, ``apply``, ``delete``,
    ``watch`` (its start) and ``pod_logs`` (its start) may be.
    """

    def create(self, obj: JsonObject) -> JsonObject:
        """POST ``obj``; raises AlreadyExists when its name is taken."""
        ...

    def apply(self, obj: JsonObject, *, force: bool = True) -> JsonObject:
        """Server-side apply as FIELD_MANAGER (creates or updates)."""
        ...

    def get(self, ref: ObjectRef) -> JsonObject:
        """The object; raises NotFound."""
        ...

    def patch(self, ref: ObjectRef, patch: JsonObject, *, subresource: str = "") -> JsonObject:
        """A JSON merge patch (RFC 7386) of the object, or of its ``subresource``
        ("status"); lists are replaced whole, so a patch of a list another writer shares
        carries ``metadata.resourceVersion`` (a 409 Conflict if it changed meanwhile)."""
        ...

    def evict(self, namespace: str, pod: str) -> None:
        """POST the pod's Eviction (policy/v1). Raises TooManyRequests while a
        PodDisruptionBudget forbids it (never retried here: the caller backs off),
        NotFound when the pod is gone."""
        ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> ObjectList:
        """Objects of a kind (in one namespace, or all when None) carrying all ``labels``."""
        ...

    def delete(self, ref: ObjectRef, *, propagation: str = "Foreground") -> bool:
        """Delete; False when it was already gone (404 is not an error here)."""
        ...

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        labels: dict[str, str] | None = None,
        timeout_s: float = 300.0,
    ) -> WatchStream:
        """Changes after ``resource_version`` (without one: the current objects as ADDED
        first). Ends after about ``timeout_s`` or when the server ends the stream; raises
        Gone when the version is too old (HTTP 410 or an in-stream 410 ERROR event)."""
        ...

    def pod_logs(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        follow: bool,
        since_time: str | None = None,
        timestamps: bool = True,
    ) -> Iterator[bytes]:
        """The container's output, line by line (each ending with a newline)."""
        ...

    def pending_workloads(self, namespace: str, local_queue: str) -> builtins.list[JsonObject]:
        """Kueue's visibility API: the LocalQueue's pending Workloads in queue order, each
        with ``positionInLocalQueue``/``positionInClusterQueue`` and its owner."""
        ...

    def server_version(self) -> JsonObject:
        """``GET /version``: ``major``, ``minor``, ``gitVersion``..."""
        ...

    def api_groups(self) -> JsonObject:
        """``GET /apis``: the APIGroupList (each group's served versions)."""
        ...

    def close(self) -> None: ...


# -- errors ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldCause:
    """One field the API server rejected (``Status.details.causes``)."""

    field: str
    message: str
    reason: str = ""


class KubeError(TauError):
    """A Kubernetes API call failed. ``verb``, ``ref`` and ``status`` say which and how."""

    code = "kube_error"
    http_status = 502  # an upstream failure, not the caller's request

    def __init__(
        self,
        message: str,
        *,
        verb: str = "",
        ref: ObjectRef | None = None,
        status: int | None = None,
        reason: str = "",
        api_message: str = "",
    ) -> None:
        super().__init__(message)
        self.verb = verb
        self.ref = ref
        self.status = status
        self.reason = reason
        self.api_message = api_message


class KubeConfigError(KubeError):
    """No usable kubeconfig or in-cluster credentials."""

    code = "kube_config"


class NotFound(KubeError):
    code = "kube_not_found"


class Conflict(KubeError):
    """409 on an update: a field conflict or a stale resourceVersion."""

    code = "kube_conflict"


class AlreadyExists(Conflict):
    """409 on a create: the name is taken."""

    code = "kube_already_exists"


class Forbidden(KubeError):
    """401 or 403: the credentials are missing, expired or lack the permission."""

    code = "kube_forbidden"


class Invalid(KubeError):
    """422: the object was rejected; ``causes`` lists the fields."""

    code = "kube_invalid"

    def __init__(self, message: str, *, causes: list[FieldCause], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.causes = causes


class TooManyRequests(KubeError):
    """429: the server asks us to wait ``retry_after`` seconds (when it said)."""

    code = "kube_too_many_requests"

    def __init__(self, message: str, *, retry_after: float | None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class Gone(KubeError):
    """410: the watch's resourceVersion is too old; list again."""

    code = "kube_gone"


class ServerError(KubeError):
    """5xx from the API server (or a proxy in front of it)."""

    code = "kube_server_error"


class Unreachable(KubeError):
    """No answer: connection refused or reset, DNS, TLS, or a timeout."""

    code = "kube_unreachable"


@dataclass(frozen=True)
class ApiFailure:
    """What an HTTP error answer said, decoded from its Status body (when it had one)."""

    status: int
    reason: str = ""
    message: str = ""
    causes: list[FieldCause] = field(default_factory=list)
    retry_after: float | None = None


_SECRET_VALUE = re.compile(r'(Invalid value: )("(?:[^"\\]|\\.)*"|\S+)')


def _describe(verb: str, ref: ObjectRef | None, what: str) -> str:
    return f"{verb} {ref}: {what}" if ref is not None else f"{verb}: {what}"


def error_for(verb: str, ref: ObjectRef | None, failure: ApiFailure) -> KubeError:
    """The KubeError for an HTTP error answer to ``verb`` on ``ref``."""
    api_message = " ".join(failure.message.split())  # one line, whatever the server sent
    if ref is not None and ref.kind == "Secret":
        api_message = _SECRET_VALUE.sub(r"\1<redacted>", api_message)
    if len(api_message) > 500:
        api_message = api_message[:497] + "..."
    status = failure.status
    detail = api_message or failure.reason or "no message"
    message = _describe(verb, ref, f"{detail} (HTTP {status})")
    kw: dict[str, Any] = {
        "verb": verb,
        "ref": ref,
        "status": status,
        "reason": failure.reason,
        "api_message": api_message,
    }
    if status == 404:
        return NotFound(message, **kw)
    if status == 409:
        exists = verb == "create" or failure.reason == "AlreadyExists"
        return AlreadyExists(message, **kw) if exists else Conflict(message, **kw)
    if status in (401, 403):
        return Forbidden(message, **kw)
    if status == 410:
        return Gone(message, **kw)
    if status == 422:
        causes = failure.causes
        if ref is not None and ref.kind == "Secret":
            causes = [
                FieldCause(c.field, _SECRET_VALUE.sub(r"\1<redacted>", c.message), c.reason)
                for c in causes
            ]
        if causes and not api_message:
            fields = "; ".join(f"{c.field}: {c.message}" for c in causes)
            message = _describe(verb, ref, f"{fields} (HTTP 422)")
        return Invalid(message, causes=causes, **kw)
    if status == 429:
        return TooManyRequests(message, retry_after=failure.retry_after, **kw)
    if status >= 500:
        return ServerError(message, **kw)
    return KubeError(message, **kw)


def unreachable(verb: str, ref: ObjectRef | None, server: str, exc: BaseException) -> Unreachable:
    """The error for a request that got no answer (``exc`` is the transport's error)."""
    what = type(exc).__name__
    text = " ".join(str(exc).split())
    if text:
        what = f"{what}: {text[:200]}"
    return Unreachable(
        _describe(verb, ref, f"no answer from {server} ({what})"), verb=verb, ref=ref
    )
