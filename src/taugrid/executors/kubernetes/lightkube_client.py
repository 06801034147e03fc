"""The real :class:`~taugrid.executors.kubernetes.client.KubeClient`, over lightkube.

lightkube gives us what is hard to get right: reading kubeconfig files and in-cluster
service-account credentials (tokens, exec plugins, client certificates, CA bundles, token
rotation) into an ``httpx2.Client`` (``lightkube.config.client_adapter``), and the
resource definitions (plural, scope) of the built-in kinds. The verbs themselves are sent
here, as JSON dicts, not through ``lightkube.Client``'s model classes, because:

- its models are lossy both ways (``msgspec.convert`` drops fields they do not know, so a
  field newer than lightkube-models would vanish from what we create or read);
- a sync ``lightkube.Client.watch`` cannot be stopped from another thread and leaves its
  response open when abandoned; ours has a thread-safe ``close()``;
- retries must depend on the verb (never a ``create``) and honour ``Retry-After``.

Every request has a timeout. Retries (429, 500/502/503/504, no answer) use capped
exponential backoff with jitter within a total budget; ``sleep`` and ``jitter`` are
injectable for tests. Nothing here logs or formats a request body or a credential.
"""

from __future__ import annotations

import builtins
import contextlib
import email.utils
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx2 as httpx
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SERVICE_ACCOUNT, KubeConfig, SingleConfig
from lightkube.config.models import User
from lightkube.core import resource as lk_resource
from lightkube.core.exceptions import ConfigError
from lightkube.core.resource_registry import resource_registry
from lightkube.generic_resource import (
    create_global_resource,
    create_namespaced_resource,
    get_generic_resource,
)

from taugrid.executors.kubernetes.client import (
    FIELD_MANAGER,
    ApiFailure,
    FieldCause,
    JsonObject,
    KubeClient,
    KubeConfigError,
    KubeError,
    NotFound,
    ObjectList,
    ObjectRef,
    ServerError,
    TooManyRequests,
    Unreachable,
    WatchEvent,
    error_for,
    kind_info,
    unreachable,
)

T = TypeVar("T")

APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML; what kubectl sends for SSA
MERGE_PATCH = "application/merge-patch+json"
# A merge patch of fields we own sets them to the same values again: safe to resend.
RETRYABLE_VERBS = frozenset({"get", "list", "apply", "patch", "delete", "watch", "logs"})
RETRYABLE_STATUS = frozenset({500, 502, 503, 504})
LIST_PAGE = 500
WATCH_GRACE_S = 10.0  # past timeoutSeconds, an idle stream is taken as dead


# Kueue's on-demand visibility API (an aggregated API, not a CRD).
VISIBILITY = "visibility.kueue.x-k8s.io/v1beta2"


def lightkube_resource(api_version: str, kind: str) -> type[lk_resource.Resource]:
    """The lightkube resource class of a kind in KINDS (generic ones for the CRDs)."""
    info = kind_info(api_version, kind)
    group = api_version.rpartition("/")[0]
    if "." not in group or group.endswith(".k8s.io"):
        res: type[lk_resource.Resource] = resource_registry.load(api_version, kind)
        return res
    existing = get_generic_resource(api_version, kind)  # type: ignore[no-untyped-call]
    if existing is not None:  # someone defined it already: one class per kind in lightkube
        return existing  # type: ignore[no-any-return]
    version = api_version.rpartition("/")[2]
    create = create_namespaced_resource if info.namespaced else create_global_resource
    return create(group, version, kind, info.plural)


def api_path(
    api_version: str, kind: str, namespace: str | None, name: str | None = None, sub: str = ""
) -> str:
    """The URL path of a kind's collection (no ``name``) or of one object."""
    res = lightkube_resource(api_version, kind)
    info = lk_resource.api_info(res)
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    namespaced = issubclass(res, lk_resource.NamespacedResource)
    if namespaced and namespace:
        base += f"/namespaces/{namespace}"
    elif namespaced and name is not None:
        raise KubeError(f"{kind} {name}: a namespaced kind needs a namespace")
    path = f"{base}/{info.plural}"
    if name is not None:
        path += f"/{name}"
    return f"{path}/{sub}" if sub else path


def labels_match(obj: Mapping[str, Any], labels: Mapping[str, str] | None) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return not labels or all(have.get(k) == v for k, v in labels.items())


def selector(labels: Mapping[str, str] | None) -> str | None:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) if labels else None


def _failure(resp: httpx.Response) -> ApiFailure:
    body: Any = None
    with contextlib.suppress(ValueError):
        body = json.loads(resp.content)
    retry_after = _retry_after(resp.headers.get("Retry-After"))
    if not isinstance(body, dict):
        return ApiFailure(resp.status_code, resp.reason_phrase, "", [], retry_after)
    return _status_failure(body, resp.status_code, retry_after)


def _status_failure(body: Mapping[str, Any], status: int, retry_after: float | None) -> ApiFailure:
    details = body.get("details") or {}
    causes = [
        FieldCause(str(c.get("field", "")), str(c.get("message", "")), str(c.get("reason", "")))
        for c in details.get("causes") or []
        if isinstance(c, dict)
    ]
    if retry_after is None and isinstance(details.get("retryAfterSeconds"), int):
        retry_after = float(details["retryAfterSeconds"])
    code = body.get("code")
    return ApiFailure(
        code if isinstance(code, int) and code >= 400 else status,
        str(body.get("reason") or ""),
        str(body.get("message") or ""),
        causes,
        retry_after,
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, float(when.timestamp()) - time.time())


class LineStream(Iterator[T]):
    """An open streaming response read line by line: a watch or a followed log.

    ``close()`` may be called from any thread: it shuts the socket down, which wakes a
    reader blocked in ``recv``; the reading thread then closes the response itself (httpx
    responses are not thread-safe). The iterator ends (StopIteration) when the server ends
    the stream, the connection breaks, ``deadline`` passes or ``close()`` was called.
    """

    def __init__(
        self, resp: httpx.Response, parse: Callable[[bytes], T | None], deadline: float | None
    ) -> None:
        self._resp = resp
        self._parse = parse
        self._deadline = deadline
        self._lock = threading.Lock()
        self._closed = False
        self._reading = False
        self._lines: Generator[bytes, None, None] = self._read_lines()

    def __iter__(self) -> LineStream[T]:
        return self

    def __next__(self) -> T:
        with self._lock:
            if self._closed:
                raise StopIteration
            self._reading = True
        try:
            while True:
                line = next(self._lines)
                item = self._parse(line)
                if item is not None:
                    return item
        except BaseException:
            self._finish()
            raise
        finally:
            with self._lock:
                self._reading = False
                closed = self._closed
            if closed:
                self._finish()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            reading = self._reading
        if not reading:
            self._finish()
            return
        stream = self._resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):  # already gone: the reader is ending anyway
                sock.shutdown(socket.SHUT_RDWR)

    def _finish(self) -> None:
        self._lines.close()
        self._resp.close()

    def _read_lines(self) -> Generator[bytes, None, None]:
        pending = b""
        try:
            for chunk in self._resp.iter_bytes():
                pending += chunk
                while (cut := pending.find(b"\n")) >= 0:
                    yield pending[: cut + 1]
                    pending = pending[cut + 1 :]
                if self._deadline is not None and time.monotonic() > self._deadline:
                    return
        except httpx.TransportError:
            return  # a cut or closed stream ends like a finished one; callers re-watch
        if pending and not self._closed:
            yield pending


class LightkubeClient(KubeClient):
    """KubeClient over one API server (see the module docstring)."""

    def __init__(
        self,
        config: SingleConfig,
        *,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        retry_budget_s: float = 30.0,
        backoff_initial_s: float = 0.2,
        backoff_cap_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        trust_env: bool = True,
    ) -> None:
        if config.user is None:
            # kubectl talks to a server anonymously; lightkube's adapter insists on a user.
            config = config._replace(user=User())
        self.server = config.cluster.server
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self._connect_timeout_s = connect_timeout_s
        params = client_adapter.ConnectionParams(timeout=self._timeout, trust_env=trust_env)
        self._http = client_adapter.Client(config, params)
        self._retry_budget_s = retry_budget_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_cap_s = backoff_cap_s
        self._sleep = sleep
        self._jitter = jitter

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str], context: str | None = None, **kw: Any
    ) -> LightkubeClient:
        try:
            config = KubeConfig.from_file(path).get(context)
        except (ConfigError, OSError, KeyError, ValueError) as exc:
            raise KubeConfigError(f"kubeconfig {path}: {exc}") from exc
        assert config is not None  # get() without a default raises instead
        return cls(config, **kw)

    @classmethod
    def in_cluster(cls, service_account: str = SERVICE_ACCOUNT, **kw: Any) -> LightkubeClient:
        try:
            config = KubeConfig.from_service_account(service_account).get()
        except (ConfigError, KeyError) as exc:
            raise KubeConfigError(
                f"in-cluster credentials: {exc} (needs KUBERNETES_SERVICE_HOST/PORT and "
                f"{service_account}/token)"
            ) from exc
        assert config is not None
        return cls(config, **kw)

    @classmethod
    def from_environment(
        cls,
        context: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        home: Path | None = None,
        service_account: str = SERVICE_ACCOUNT,
        **kw: Any,
    ) -> LightkubeClient:
        """Like kubectl: the files in KUBECONFIG (merged, the first one wins), else
        ~/.kube/config, else in-cluster credentials."""
        env = os.environ if environ is None else environ
        default = (home or Path.home()) / ".kube" / "config"
        if env.get("KUBECONFIG"):
            paths = [Path(p).expanduser() for p in env["KUBECONFIG"].split(os.pathsep) if p]
            found = [p for p in paths if p.is_file()]
            if not found:
                listed = ", ".join(str(p) for p in paths)
                raise KubeConfigError(f"KUBECONFIG names no existing file ({listed})")
            return cls(_merged_config(found, context), **kw)
        if default.is_file():
            return cls.from_kubeconfig(default, context, **kw)
        if env.get("KUBERNETES_SERVICE_HOST") and Path(service_account, "token").is_file():
            return cls.in_cluster(service_account, **kw)
        raise KubeConfigError(
            f"no Kubernetes credentials: KUBECONFIG is unset, {default} does not exist, and "
            f"this is not a pod (KUBERNETES_SERVICE_HOST or {service_account}/token missing)"
        )

    # -- verbs -----------------------------------------------------------------------------
    def create(self, obj: JsonObject) -> JsonObject:
        ref = ObjectRef.of(obj)
        if kind_info(ref.api_version, ref.kind).namespaced and not ref.namespace:
            raise KubeError(f"create {ref}: metadata.namespace is required", verb="create", ref=ref)
        path = api_path(ref.api_version, ref.kind, ref.namespace)
        resp = self._call("create", ref, "POST", path, body=obj)
        return _object(resp, "create", ref)

    def apply(self, obj: JsonObject, *, force: bool = True) -> JsonObject:
        ref = ObjectRef.of(obj)
        path = api_path(ref.api_version, ref.kind, ref.namespace, ref.name)
        params = {"fieldManager": FIELD_MANAGER}
        if force:
            params["force"] = "true"
        resp = self._call(
            "apply", ref, "PATCH", path, params=params, body=obj, content_type=APPLY_PATCH
        )
        return _object(resp, "apply", ref)

    def get(self, ref: ObjectRef) -> JsonObject:
        path = api_path(ref.api_version, ref.kind, ref.namespace, ref.name)
        return _object(self._call("get", ref, "GET", path), "get", ref)

    def patch(self, ref: ObjectRef, patch: JsonObject, *, subresource: str = "") -> JsonObject:
        path = api_path(ref.api_version, ref.kind, ref.namespace, ref.name, subresource)
        resp = self._call("patch", ref, "PATCH", path, body=patch, content_type=MERGE_PATCH)
        return _object(resp, "patch", ref)

    def evict(self, namespace: str, pod: str) -> None:
        ref = ObjectRef("v1", "Pod", namespace, pod)
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        path = api_path("v1", "Pod", namespace, pod, "eviction")
        self._call("evict", ref, "POST", path, body=body).close()

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> ObjectList:
        ref = ObjectRef(api_version, kind, namespace, "*")
        path = api_path(api_version, kind, namespace)
        params = {"limit": str(LIST_PAGE)}
        if (sel := selector(labels)) is not None:
            params["labelSelector"] = sel
        items: builtins.list[JsonObject] = []
        version: str | None = None
        while True:
            page = _json(self._call("list", ref, "GET", path, params=params), "list", ref)
            meta = page.get("metadata") or {}
            version = version or meta.get("resourceVersion") or None
            for item in page.get("items") or []:
                item.setdefault("apiVersion", api_version)  # list items may omit both
                item.setdefault("kind", kind)
                # The selector is also applied here: a server (or a fake) ignoring it
                # must not hand us other runs' objects.
                if labels_match(item, labels):
                    items.append(item)
            if not meta.get("continue"):
                return ObjectList(items, version)
            params["continue"] = meta["continue"]

    def delete(self, ref: ObjectRef, *, propagation: str = "Foreground") -> bool:
        path = api_path(ref.api_version, ref.kind, ref.namespace, ref.name)
        try:
            resp = self._call(
                "delete", ref, "DELETE", path, params={"propagationPolicy": propagation}
            )
        except NotFound:
            return False
        resp.close()
        return True

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        labels: dict[str, str] | None = None,
        timeout_s: float = 300.0,
    ) -> LineStream[WatchEvent]:
        ref = ObjectRef(api_version, kind, namespace, "*")
        params = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(max(1, int(timeout_s))),
        }
        if resource_version:
            params["resourceVersion"] = resource_version
        if (sel := selector(labels)) is not None:
            params["labelSelector"] = sel
        timeout = httpx.Timeout(
            self._timeout.write, connect=self._connect_timeout_s, read=timeout_s + WATCH_GRACE_S
        )
        path = api_path(api_version, kind, namespace)
        resp = self._call("watch", ref, "GET", path, params=params, stream=True, timeout=timeout)
        parse = _event_parser(ref, labels)
        return LineStream(resp, parse, time.monotonic() + timeout_s)

    def pod_logs(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        follow: bool,
        since_time: str | None = None,
        timestamps: bool = True,
    ) -> LineStream[bytes]:
        ref = ObjectRef("v1", "Pod", namespace, pod)
        params = {"container": container}
        if follow:
            params["follow"] = "true"
        if timestamps:
            params["timestamps"] = "true"
        if since_time:
            params["sinceTime"] = since_time
        # A followed log may be quiet for hours: no read timeout; close() ends it.
        read = None if follow else self._timeout.read
        timeout = httpx.Timeout(self._timeout.write, connect=self._connect_timeout_s, read=read)
        path = api_path("v1", "Pod", namespace, pod, "log")
        resp = self._call("logs", ref, "GET", path, params=params, stream=True, timeout=timeout)
        return LineStream(resp, lambda line: line, None)

    def pending_workloads(self, namespace: str, local_queue: str) -> builtins.list[JsonObject]:
        ref = ObjectRef(VISIBILITY, "LocalQueue", namespace, local_queue)
        path = (
            f"/apis/{VISIBILITY}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"
        )
        body = _json(self._call("get", ref, "GET", path), "get", ref)
        items = body.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def server_version(self) -> JsonObject:
        ref = ObjectRef("v1", "Version", None, "/version")
        return _json(self._call("get", ref, "GET", "/version"), "get", ref)

    def api_groups(self) -> JsonObject:
        ref = ObjectRef("v1", "APIGroupList", None, "/apis")
        return _json(self._call("get", ref, "GET", "/apis"), "get", ref)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> LightkubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request, retried where that is safe ---------------------------------------------
    def _call(
        self,
        verb: str,
        ref: ObjectRef,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: JsonObject | None = None,
        content_type: str = "application/json",
        stream: bool = False,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        started = time.monotonic()
        slept = 0.0  # counted too: an injected sleep may not pass any time
        attempt = 0
        while True:
            try:
                return self._send_once(
                    verb, ref, method, path, params, body, content_type, stream, timeout
                )
            except (TooManyRequests, ServerError, Unreachable) as exc:
                if verb not in RETRYABLE_VERBS:
                    raise
                if isinstance(exc, ServerError) and exc.status not in RETRYABLE_STATUS:
                    raise
                delay = self._backoff(attempt, exc)
                spent = max(time.monotonic() - started, slept)
                if spent + delay > self._retry_budget_s:
                    raise
                self._sleep(delay)
                slept += delay
                attempt += 1

    def _backoff(self, attempt: int, exc: KubeError) -> float:
        ceiling = min(self._backoff_cap_s, self._backoff_initial_s * 2.0**attempt)
        delay = ceiling * (0.5 + 0.5 * self._jitter())  # never all retrying in step
        if isinstance(exc, TooManyRequests) and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        return delay

    def _send_once(
        self,
        verb: str,
        ref: ObjectRef,
        method: str,
        path: str,
        params: dict[str, str] | None,
        body: JsonObject | None,
        content_type: str,
        stream: bool,
        timeout: httpx.Timeout | None,
    ) -> httpx.Response:
        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            content = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        request = self._http.build_request(
            method,
            path,
            params=params,
            content=content,
            headers=headers,
            timeout=timeout if timeout is not None else self._timeout,
        )
        try:
            resp = self._http.send(request, stream=stream)
        except httpx.TransportError as exc:
            raise unreachable(verb, ref, self.server, exc) from None
        if resp.status_code < 400:
            return resp
        try:
            if stream:
                resp.read()
            failure = _failure(resp)
        except httpx.TransportError as exc:
            raise unreachable(verb, ref, self.server, exc) from None
        finally:
            resp.close()
        raise error_for(verb, ref, failure)


def _json(resp: httpx.Response, verb: str, ref: ObjectRef) -> JsonObject:
    try:
        data = json.loads(resp.content)
    except ValueError:
        data = None
    finally:
        resp.close()
    if not isinstance(data, dict):
        raise KubeError(f"{verb} {ref}: the answer is not a JSON object", verb=verb, ref=ref)
    return data


def _object(resp: httpx.Response, verb: str, ref: ObjectRef) -> JsonObject:
    obj = _json(resp, verb, ref)
    obj.setdefault("apiVersion", ref.api_version)
    obj.setdefault("kind", ref.kind)
    return obj


def _event_parser(
    ref: ObjectRef, labels: Mapping[str, str] | None
) -> Callable[[bytes], WatchEvent | None]:
    def parse(line: bytes) -> WatchEvent | None:
        if not line.strip():
            return None
        try:
            event = json.loads(line)
        except ValueError:
            raise KubeError(f"watch {ref}: a line of the stream is not JSON") from None
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            return None
        if kind == "ERROR":
            raise error_for("watch", ref, _status_failure(obj, 500, None))
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            return None
        if kind != "BOOKMARK":
            obj.setdefault("apiVersion", ref.api_version)
            obj.setdefault("kind", ref.kind)
            if not labels_match(obj, labels):
                # A server ignoring the selector: the object left (or never was in) our
                # selection. DELETED is what a server applying it would have said.
                if kind == "ADDED":
                    return None
                kind = "DELETED"
        return WatchEvent(kind, obj)

    return parse


def _merged_config(paths: builtins.list[Path], context: str | None) -> SingleConfig:
    """KUBECONFIG's files merged as kubectl does: for each name, the first file wins."""
    clusters: dict[str, Any] = {}
    contexts: dict[str, Any] = {}
    users: dict[str, Any] = {}
    current: str | None = None
    for path in paths:
        try:
            one = KubeConfig.from_file(path)
        except (ConfigError, OSError, KeyError, ValueError) as exc:
            raise KubeConfigError(f"kubeconfig {path}: {exc}") from exc
        clusters = {**one.clusters, **clusters}
        contexts = {**one.contexts, **contexts}
        users = {**one.users, **users}
        current = current or one.current_context
    merged = KubeConfig(
        clusters=clusters, contexts=contexts, users=users, current_context=current, fname=paths[0]
    )
    try:
        config = merged.get(context)
    except (ConfigError, KeyError) as exc:
        listed = os.pathsep.join(str(p) for p in paths)
        raise KubeConfigError(f"kubeconfig {listed}: {exc}") from exc
    assert config is not None
    return config
