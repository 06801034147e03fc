"""A Kubernetes API over real HTTP for tests: kmock's emulator on 127.0.0.1, in a thread.

``KubeEmulator`` runs ``kmock.KubernetesEmulator`` + ``kmock.Server`` on a random loopback
port with its own asyncio loop on a background thread, so synchronous tests (and the
synchronous client under test) talk to it over a socket. The test plays the cluster's
controllers through thread-safe helpers (``put``, ``patch_status``, ``delete``,
``append_log``...) whose writes reach open watches like the API's own writes, and injects
faults (``fail_next``, ``drop_next``, ``cut_watches``, ``expire_watches``).

What this adds to kmock 0.8 (its gaps, see shared/reference/kubernetes-testing.md):
- every kind of ``KINDS`` is declared, so listing an empty kind answers 200, not 404;
- ``/api/v1/namespaces[/NAME]`` is the Namespace resource (kmock 0.8 fails on it);
- server-side apply (a PATCH with ``application/apply-patch+yaml``) of a missing object
  creates it (kmock answers 404); on an existing one it is a merge patch, not real SSA;
- faults are answered before kmock touches its store (kmock records a create even when a
  reaction answers it), so an injected 500 on a create leaves nothing behind;
- ``GET .../pods/P/log`` serves lines the test appended (kmock would return the Pod),
  with ``container``, ``timestamps``, ``sinceTime`` and ``follow``; ``cut_logs()`` ends
  the open followed streams mid-way (the log goes on), ``drop_log()`` forgets a log (as
  the kubelet does with a deleted pod's), and ``since_time_seconds=True`` reads
  ``sinceTime`` in whole seconds, as a real API server forwards it to the kubelet;
- ``POST .../pods/P/eviction`` (the Eviction API) deletes the pod and remembers it in
  ``evicted``; a PodDisruptionBudget's refusal is a test's ``fail_next`` 429 on that path;
- ``resource_versions=True`` stamps a counter as ``metadata.resourceVersion`` on every
  change and on lists, and a watch from a version replays the changes after it (410 Gone
  once ``compact()`` forgot them); by default objects carry none and a watch ignores the
  version, as in kmock.
Label selectors stay ignored, as in kmock: clients must cope (ours filters too).
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import functools
import re
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import kmock
from kmock._internal import enums, parsing, rendering
from kmock._internal.aiobus import Bus

from taugrid.executors.kubernetes.client import KINDS

T = TypeVar("T")
APPLY = "application/apply-patch+yaml"
LOG_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log")
EVICTION_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction")
PENDING_PATH = re.compile(
    r"/apis/visibility\.kueue\.x-k8s\.io/v1beta2/namespaces/([^/]+)/localqueues/([^/]+)"
    r"/pendingworkloads"
)


_kmock_parse_path = parsing.parse_path


def _parse_path(path: str) -> parsing.ParsedPath:
    """kmock 0.8 reads ``/api/v1/namespaces[/NAME]`` as a namespace without a resource
    (and fails on the collection): Namespace objects are their own resource."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and (
        len(parts) <= 4 or (len(parts) == 5 and parts[4] in ("status", "finalize"))
    ):
        name = parts[3] if len(parts) > 3 else None
        sub = parts[4] if len(parts) > 4 else None
        return parsing.ParsedPath("", "v1", "namespaces", None, name, sub)
    return _kmock_parse_path(path)


parsing.parse_path = _parse_path  # kmock looks it up at each request


def resource_of(api_version: str, kind: str) -> kmock.resource:
    group, _, version = api_version.rpartition("/")
    return kmock.resource(group, version, KINDS[(api_version, kind)].plural)


@dataclass
class Fault:
    """An answer given instead of the real one, ``times`` times, to matching requests."""

    verb: str | None  # create get list watch apply patch delete logs; None: any
    plural: str | None
    path: re.Pattern[str] | None
    status: int  # 0: drop the connection without an answer
    times: int
    retry_after: float | None = None
    reason: str = ""
    message: str = ""
    causes: list[dict[str, str]] = field(default_factory=list)

    def matches(self, verb: str, plural: str | None, path: str) -> bool:
        if self.path is not None:
            return self.path.fullmatch(path) is not None
        return self.verb in (None, verb) and self.plural in (None, plural)


@dataclass(frozen=True)
class SeenRequest:
    verb: str
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    data: Any


@dataclass
class _Log:
    lines: list[tuple[str, bytes]] = field(default_factory=list)  # (timestamp, line)
    ended: bool = False
    cuts: int = 0  # how many times cut_logs() ended the open streams

    def grown(self, seen: int, cuts: int = 0) -> bool:
        return len(self.lines) > seen or self.ended or self.cuts != cuts


class _Versions:
    """resourceVersion bookkeeping kmock lacks: a counter stamped on every change, and the
    changes since the last compaction, so a watch from a version replays what followed."""

    def __init__(self) -> None:
        self.current = 0
        self.oldest = 0  # a watch from before this answers 410
        self.history: list[tuple[int, kmock.resource, dict[str, Any]]] = []

    def record(self, res: kmock.resource, event: dict[str, Any]) -> None:
        self.current += 1
        # The event's metadata is the stored version's own dict (kmock copies shallowly),
        # so the store, lists and answers carry the same version as the event.
        event["object"].setdefault("metadata", {})["resourceVersion"] = str(self.current)
        self.history.append((self.current, res, copy.deepcopy(event)))


class _Bus(Bus[Any]):
    def __init__(self, res: kmock.resource, versions: _Versions | None) -> None:
        super().__init__()
        self.res = res
        self.versions = versions

    async def put(self, *items: Any) -> None:
        if self.versions is not None:
            for item in items:
                if isinstance(item, dict) and isinstance(item.get("object"), dict):
                    self.versions.record(self.res, item)
        await super().put(*items)


class _Buses(dict[kmock.resource, _Bus]):
    def __init__(self, versions: _Versions | None) -> None:
        super().__init__()
        self.versions = versions

    def __missing__(self, res: kmock.resource) -> _Bus:
        bus = self[res] = _Bus(res, self.versions)
        return bus


class _Emulator(kmock.KubernetesEmulator):
    """kmock's emulator with the additions listed in the module docstring."""

    versions: _Versions | None = None  # set before entering, to stamp resourceVersions
    since_time_seconds = False  # sinceTime in whole seconds (a real API server's)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.faults: list[Fault] = []
        self.faults_lock = threading.Lock()
        self.watch_inboxes: set[asyncio.Queue[tuple[str, dict[str, Any] | None]]] = set()
        self.holds: dict[str, asyncio.Event] = {}
        self.held: dict[str, int] = {}
        self.logs: dict[tuple[str, str, str], _Log] = {}
        self.logs_changed = asyncio.Condition()
        for (api_version, kind), info in KINDS.items():
            self.resources[resource_of(api_version, kind)] = kmock.ResourceInfo(
                kind=kind, namespaced=info.namespaced, verbs={"get", "list", "watch"}
            )
        self["get", LOG_PATH] << self._serve_log
        # The Eviction API: the pod goes (a PodDisruptionBudget's 429 is a test's fault).
        self["post", EVICTION_PATH] << self._serve_eviction
        self.evicted: list[tuple[str, str]] = []
        # Kueue's visibility API, as the test says the queue stands (set_pending).
        self.pending: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self["get", PENDING_PATH] << self._serve_pending

    def use_versions(self, versions: _Versions) -> None:
        self.versions = versions
        self._buses = _Buses(versions)

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        verb = _verb(request)
        plural = request.resource.plural if request.resource is not None else None
        hold = self.holds.get(verb)
        if hold is not None and not hold.is_set():
            self.held[verb] = self.held.get(verb, 0) + 1
            try:
                await hold.wait()
            finally:
                self.held[verb] -= 1
        fault = self._take_fault(verb, plural, request.url.path)
        if fault is not None:
            return await self._answer_fault(request, fault)
        if verb == "apply" and request.resource is not None and isinstance(request.data, dict):
            key = (request.resource, request.namespace, request.name)
            async with self._lock:
                missing = key not in self.objects or self.objects[key].deleted
                if missing:  # server-side apply creates; kmock would answer 404
                    if key in self.objects:
                        self.objects[key].create(request.data)
                    else:
                        self.objects[key] = request.data
                    raw = self.objects[key].raw
                    await self._buses[request.resource].put({"type": "ADDED", "object": raw})
            if missing:
                return aiohttp.web.json_response(raw, status=201)
        return await super()._handle(request)

    def _take_fault(self, verb: str, plural: str | None, path: str) -> Fault | None:
        with self.faults_lock:
            for fault in self.faults:
                if fault.matches(verb, plural, path):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    async def _answer_fault(
        self, request: rendering.Request, fault: Fault
    ) -> aiohttp.web.StreamResponse:
        if fault.status == 0:
            raw = request._raw_request
            assert raw is not None and raw.transport is not None
            raw.transport.abort()  # no answer at all: the client sees a broken connection
            return aiohttp.web.Response(status=500)
        body = {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": fault.status,
            "reason": fault.reason,
            "message": fault.message or f"injected HTTP {fault.status}",
            "details": {"causes": fault.causes} if fault.causes else {},
        }
        headers = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = f"{fault.retry_after:g}"
        return aiohttp.web.json_response(body, status=fault.status, headers=headers)

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        answer = await super()._serve_list(request)
        if self.versions is not None and isinstance(answer, dict):
            answer["metadata"] = {"resourceVersion": str(self.versions.current)}
        return answer

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        # kmock's watch never ends; this one ends after timeoutSeconds or when the test cuts
        # it, and the test can slip events in (a BOOKMARK, a last ERROR).
        inbox: asyncio.Queue[tuple[str, dict[str, Any] | None]] = asyncio.Queue()
        self.watch_inboxes.add(inbox)
        events = self._watch_events(request)
        step: asyncio.Future[rendering.Payload] | None = None
        note: asyncio.Future[tuple[str, dict[str, Any] | None]] | None = None
        loop = asyncio.get_running_loop()
        timeout = request.params.get("timeoutSeconds")
        until = loop.time() + float(timeout) if timeout else None  # kmock ignores it
        try:
            while True:
                step = step or asyncio.ensure_future(anext(events))
                note = note or asyncio.ensure_future(inbox.get())
                left = None if until is None else max(0.0, until - loop.time())
                await asyncio.wait({step, note}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if note.done():
                    what, event = note.result()
                    note = None
                    if event is not None:
                        yield event
                    if what == "end":
                        return
                elif step.done():
                    try:
                        item = step.result()
                    except StopAsyncIteration:
                        return
                    step = None
                    yield item
                else:
                    return  # timeoutSeconds passed, as a real server ends the watch
        finally:
            self.watch_inboxes.discard(inbox)
            pending = {f for f in (step, note) if f is not None and not f.done()}
            for future in pending:
                future.cancel()
            if pending:
                await asyncio.wait(pending)
            await events.aclose()

    def _watch_events(self, request: rendering.Request) -> AsyncGenerator[rendering.Payload]:
        since = request.params.get("resourceVersion")
        if self.versions is None or not since or since == "0":
            return super()._serve_watch(request)  # the current objects as ADDED, then live
        return self._watch_since(request, int(since), self.versions)

    async def _watch_since(
        self, request: rendering.Request, since: int, versions: _Versions
    ) -> AsyncGenerator[rendering.Payload]:
        if since < versions.oldest:
            raise kmock.KubernetesError(
                status=410, reason="Expired", message=f"too old resource version: {since}"
            )
        assert request.resource is not None
        bus = self._buses[request.resource]
        async with self._lock:  # no change between the backlog and the live part
            mark = await bus.mark()
            backlog = [
                event
                for rv, res, event in versions.history
                if rv > since and res == request.resource and self._sees(request, event)
            ]
        try:
            yield b""
            for event in backlog:
                yield event
            async for event in bus.stream(since=mark):
                if self._sees(request, event):
                    yield event
        finally:
            await bus.unmark(mark)

    @staticmethod
    def _sees(request: rendering.Request, event: dict[str, Any]) -> bool:
        namespace = (event.get("object", {}).get("metadata") or {}).get("namespace")
        return request.namespace is None or namespace == request.namespace

    async def _serve_pending(self, request: rendering.Request) -> rendering.Payload:
        match = PENDING_PATH.fullmatch(request.url.path)
        assert match is not None
        items = self.pending.get((match[1], match[2]), [])
        return {
            "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
            "kind": "PendingWorkloadsSummary",
            "metadata": {},
            "items": items,
        }

    async def _serve_eviction(self, request: rendering.Request) -> rendering.Payload:
        match = EVICTION_PATH.fullmatch(request.url.path)
        assert match is not None
        res = resource_of("v1", "Pod")
        key = (res, match[1], match[2])
        async with self._lock:
            if key not in self.objects or self.objects[key].deleted:
                raise kmock.KubernetesNotFoundError(message=f'pods "{match[2]}" not found')
            raw = self.objects[key].raw
            self.objects[key].delete()
            self.evicted.append((match[1], match[2]))
            await self._buses[res].put({"type": "DELETED", "object": raw})
        return {"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201}

    async def _serve_log(self, request: rendering.Request) -> rendering.Payload:
        match = LOG_PATH.fullmatch(request.url.path)
        assert match is not None
        key = (match[1], match[2], request.params.get("container", ""))
        if key not in self.logs:
            raise kmock.KubernetesNotFoundError(message=f'pods "{key[1]}" not found')
        stamps = request.params.get("timestamps") == "true"
        since = request.params.get("sinceTime")
        if since is not None and self.since_time_seconds:
            since = since[:19]  # YYYY-MM-DDTHH:MM:SS: every line of that second is >= it
        log = self.logs[key]

        def render(start: int) -> bytes:
            out = b""
            for ts, line in log.lines[start:]:
                if since is None or ts >= since:
                    out += (ts.encode() + b" " + line) if stamps else line
            return out

        if request.params.get("follow") != "true":
            return render(0)

        async def follow() -> AsyncIterator[bytes]:
            sent, cuts = 0, log.cuts
            while True:
                chunk = render(sent)
                sent = len(log.lines)
                yield chunk  # the first one, even empty, sends the headers
                if log.ended or log.cuts != cuts:
                    return
                async with self.logs_changed:
                    await self.logs_changed.wait_for(functools.partial(log.grown, sent, cuts))

        return follow()


def _verb(request: rendering.Request) -> str:
    if request.action is None:
        return str(request.method.value).lower()
    if request.action == enums.action.FETCH:
        return "logs" if request.subresource == "log" else "get"
    if request.action == enums.action.UPDATE:
        content_type = request.headers.get("Content-Type", "")
        return "apply" if content_type.startswith(APPLY) else "patch"
    return str(request.action.value).lower()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeEmulator:
    """kmock on 127.0.0.1 in a background thread; a context manager. See the module doc."""

    def __init__(
        self, *, resource_versions: bool = False, since_time_seconds: bool = False
    ) -> None:
        self._resource_versions = resource_versions
        self._since_time_seconds = since_time_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.emulator: _Emulator | None = None
        self.url = ""

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> KubeEmulator:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="kube-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            self.__exit__()
            raise RuntimeError(f"kmock did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._stop is not None and thread.is_alive():
            loop.call_soon_threadsafe(self._stop.set)
        thread.join(10)
        if not loop.is_closed() and not thread.is_alive():
            loop.close()
        self._loop = self._thread = None

    def _run(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
        finally:
            asyncio.set_event_loop(None)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        emulator = _Emulator()
        emulator.since_time_seconds = self._since_time_seconds
        if self._resource_versions:
            emulator.use_versions(_Versions())
        async with emulator, kmock.Server(emulator, host="127.0.0.1") as server:
            self.emulator = emulator
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()
            for event in emulator.holds.values():
                event.set()
            for inbox in list(emulator.watch_inboxes):  # end the streams before the server
                inbox.put_nowait(("end", None))
            async with emulator.logs_changed:
                for log in emulator.logs.values():
                    log.ended = True
                emulator.logs_changed.notify_all()
            await asyncio.sleep(0.05)

    def _call(self, make: Callable[[], Coroutine[Any, Any, T]], timeout: float = 10) -> T:
        assert self._loop is not None, "KubeEmulator is not running"
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(timeout)

    @property
    def _emu(self) -> _Emulator:
        assert self.emulator is not None, "KubeEmulator is not running"
        return self.emulator

    def write_kubeconfig(self, path: Path, context: str = "kmock") -> Path:
        """A kubeconfig for this server (with a user entry: lightkube needs one)."""
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: {context}\n  cluster:\n    server: {self.url}\n"
            f"users:\n- name: {context}\n  user:\n    token: test-token\n"
            f"contexts:\n- name: {context}\n  context:\n    cluster: {context}\n"
            f"    user: {context}\n    namespace: default\n"
            f"current-context: {context}\n"
        )
        return path

    # -- the store, as controllers would change it -------------------------------------------
    def put(self, obj: dict[str, Any], *, silent: bool = False) -> dict[str, Any]:
        """Create or replace ``obj``; watches see ADDED or MODIFIED, unless ``silent`` (a
        change whose event is lost: only a relist finds it)."""
        meta = obj["metadata"]
        res = resource_of(obj["apiVersion"], obj["kind"])
        key = (res, meta.get("namespace"), meta["name"])

        async def put() -> dict[str, Any]:
            emu = self._emu
            async with emu._lock:
                existed = key in emu.objects and not emu.objects[key].deleted
                if key in emu.objects:
                    emu.objects[key].create(obj)
                else:
                    emu.objects[key] = obj
                raw: dict[str, Any] = emu.objects[key].raw
                if not silent:
                    kind = "MODIFIED" if existed else "ADDED"
                    await emu._buses[res].put({"type": kind, "object": raw})
            return copy.deepcopy(raw)

        return self._call(put)

    def patch_status(
        self, api_version: str, kind: str, namespace: str | None, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge ``status`` into the object's status (watches see MODIFIED)."""
        return self.patch(api_version, kind, namespace, name, {"status": status})

    def patch(
        self, api_version: str, kind: str, namespace: str | None, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        res = resource_of(api_version, kind)
        key = (res, namespace, name)

        async def apply() -> dict[str, Any]:
            emu = self._emu
            async with emu._lock:
                emu.objects[key].patch(patch)
                raw: dict[str, Any] = emu.objects[key].raw
                await emu._buses[res].put({"type": "MODIFIED", "object": raw})
            return raw

        return self._call(apply)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        """Delete now, finalizers or not (watches see DELETED); False if it was not there."""
        res = resource_of(api_version, kind)
        key = (res, namespace, name)

        async def delete() -> bool:
            emu = self._emu
            async with emu._lock:
                if key not in emu.objects or emu.objects[key].deleted:
                    return False
                raw = emu.objects[key].raw
                emu.objects[key].delete()
                await emu._buses[res].put({"type": "DELETED", "object": raw})
            return True

        return self._call(delete)

    def clear(self) -> None:
        """Forget every object (no events) and the request log."""

        async def clear() -> None:
            async with self._emu._lock:
                self._emu.objects.clear()
                self._emu._requests.clear()

        self._call(clear)

    def evictions(self) -> list[tuple[str, str]]:
        """(namespace, pod) of every eviction the API accepted, in order."""

        async def evicted() -> list[tuple[str, str]]:
            return list(self._emu.evicted)

        return self._call(evicted)

    def forget_requests(self) -> None:
        """Empty the request log. kmock matches each request against every request it has
        logged, so its cost per request grows with the log (a benchmark empties it)."""

        async def forget() -> None:
            self._emu._requests.clear()

        self._call(forget)

    def get(
        self, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """The stored object (a copy), or None."""
        res = resource_of(api_version, kind)
        key = (res, namespace, name)

        async def get() -> dict[str, Any] | None:
            emu = self._emu
            async with emu._lock:
                if key not in emu.objects or emu.objects[key].deleted:
                    return None
                raw: dict[str, Any] = copy.deepcopy(emu.objects[key].raw)
                return raw

        return self._call(get)

    def objects(
        self, api_version: str, kind: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Every stored object of a kind (in one namespace, or all), as copies."""
        res = resource_of(api_version, kind)

        async def objects() -> list[dict[str, Any]]:
            emu = self._emu
            async with emu._lock:
                return [
                    copy.deepcopy(obj.raw)
                    for (r, ns, _), obj in emu.objects.items()
                    if r == res and not obj.deleted and namespace in (None, ns)
                ]

        return self._call(objects)

    def requests(self, verb: str | None = None) -> list[SeenRequest]:
        """Every request served so far (of one verb: create get list watch apply...)."""

        async def seen() -> list[SeenRequest]:
            out = []
            for req in list(self._emu._requests):
                if verb is None or _verb(req) == verb:
                    out.append(
                        SeenRequest(
                            _verb(req),
                            str(req.method.value),
                            req.url.path,
                            dict(req.params),
                            dict(req.headers),
                            copy.deepcopy(req.data),
                        )
                    )
            return out

        return self._call(seen)

    def compact(self) -> None:
        """Forget the change history (as etcd compaction does): a watch from an older
        resourceVersion answers 410 Gone. Needs ``resource_versions=True``."""

        async def compact() -> None:
            versions = self._emu.versions
            assert versions is not None, "compact() needs KubeEmulator(resource_versions=True)"
            async with self._emu._lock:
                versions.oldest = versions.current
                versions.history.clear()

        self._call(compact)

    # -- pod logs --------------------------------------------------------------------------
    def append_log(
        self, namespace: str, pod: str, container: str, text: str, *, ts: str | None = None
    ) -> None:
        """Append lines (``text`` is split after each newline) to a container's log."""

        async def append() -> None:
            emu = self._emu
            async with emu.logs_changed:
                log = emu.logs.setdefault((namespace, pod, container), _Log())
                for line in text.splitlines(keepends=True):
                    log.lines.append((ts or _now(), line.encode()))
                emu.logs_changed.notify_all()

        self._call(append)

    def set_pending(self, namespace: str, local_queue: str, items: list[dict[str, Any]]) -> None:
        """What Kueue's visibility API answers for the LocalQueue's pending Workloads."""
        self._emu.pending[(namespace, local_queue)] = items

    def end_log(self, namespace: str, pod: str, container: str) -> None:
        """The container exited: followers of its log see the stream end."""

        async def end() -> None:
            emu = self._emu
            async with emu.logs_changed:
                emu.logs.setdefault((namespace, pod, container), _Log()).ended = True
                emu.logs_changed.notify_all()

        self._call(end)

    def cut_logs(self, namespace: str | None = None, pod: str | None = None) -> None:
        """End the open followed log streams (of one pod, or all) mid-way: the container
        runs on and its log keeps growing; a follower must resume."""

        async def cut() -> None:
            emu = self._emu
            async with emu.logs_changed:
                for (ns, name, _), log in emu.logs.items():
                    if namespace in (None, ns) and pod in (None, name):
                        log.cuts += 1
                emu.logs_changed.notify_all()

        self._call(cut)

    def drop_log(self, namespace: str, pod: str, container: str) -> None:
        """Forget a container's log (the kubelet's, once its pod is deleted): reads 404."""

        async def drop() -> None:
            emu = self._emu
            async with emu.logs_changed:
                log = emu.logs.pop((namespace, pod, container), None)
                if log is not None:
                    log.ended = True  # open followers end
                emu.logs_changed.notify_all()

        self._call(drop)

    # -- faults ----------------------------------------------------------------------------
    def fail_next(
        self,
        pattern: str,
        status: int,
        times: int = 1,
        retry_after: float | None = None,
        *,
        reason: str = "",
        message: str = "",
        causes: list[dict[str, str]] | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with an error Status.

        ``pattern``: ``"VERB"`` or ``"VERB PLURAL"`` (verbs: create get list watch apply
        patch delete logs; ``"*"`` any), or a URL path regex starting with ``/``.
        """
        if pattern.startswith("/"):
            verb, plural, path = None, None, re.compile(pattern)
        else:
            word, _, rest = pattern.partition(" ")
            verb, plural, path = (None if word == "*" else word), (rest or None), None
        fault = Fault(verb, plural, path, status, times, retry_after, reason, message, causes or [])
        with self._emu.faults_lock:
            self._emu.faults.append(fault)

    def drop_next(self, pattern: str, times: int = 1) -> None:
        """Close the connection of the next ``times`` matching requests without answering."""
        self.fail_next(pattern, 0, times)

    def pending_faults(self) -> int:
        with self._emu.faults_lock:
            return sum(f.times for f in self._emu.faults)

    def watch_count(self) -> int:
        """How many watch streams are open now."""

        async def count() -> int:
            return len(self._emu.watch_inboxes)

        return self._call(count)

    def watchers(self, api_version: str, kind: str) -> int:
        """How many watches of a kind receive changes now (kmock subscribes a watch only
        after sending its initial ADDED events: a change before that is lost to it)."""
        res = resource_of(api_version, kind)

        async def count() -> int:
            bus = self._emu._buses.get(res)
            return 0 if bus is None else bus.consumer_count

        return self._call(count)

    def wait_watchers(self, api_version: str, kind: str, n: int = 1, timeout: float = 5) -> None:
        deadline = time.monotonic() + timeout
        while self.watchers(api_version, kind) != n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.watchers(api_version, kind)} watchers, not {n}")
            time.sleep(0.005)

    def cut_watches(self) -> int:
        """End every open watch stream cleanly (as a server-side timeout would)."""
        return self._to_watches("end", None)

    def expire_watches(self) -> int:
        """End every open watch with an in-stream ERROR 410 (resourceVersion too old)."""
        status = {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version",
        }
        return self._to_watches("end", {"type": "ERROR", "object": status})

    def bookmark(self, api_version: str, kind: str, resource_version: str) -> int:
        """Send a BOOKMARK event on every open watch."""
        obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
        obj["metadata"] = {"resourceVersion": resource_version}
        return self._to_watches("event", {"type": "BOOKMARK", "object": obj})

    def _to_watches(self, what: str, event: dict[str, Any] | None) -> int:
        async def send() -> int:
            for inbox in self._emu.watch_inboxes:
                inbox.put_nowait((what, event))
            return len(self._emu.watch_inboxes)

        return self._call(send)

    # -- holding requests ------------------------------------------------------------------
    def hold(self, verb: str) -> None:
        """Make requests of ``verb`` (create get list watch apply patch delete logs) wait
        until ``release(verb)``: a window in which the test changes things unseen."""

        async def hold() -> None:
            self._emu.holds.setdefault(verb, asyncio.Event()).clear()

        self._call(hold)

    def held(self, verb: str) -> int:
        """How many requests of ``verb`` are waiting now."""

        async def held() -> int:
            return self._emu.held.get(verb, 0)

        return self._call(held)

    def release(self, verb: str) -> None:
        async def release() -> None:
            event = self._emu.holds.pop(verb, None)
            if event is not None:
                event.set()

        self._call(release)


class Sleeps(list[float]):
    """An injectable ``sleep`` for clients under test: records each delay, sleeps none."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


# -- sample objects ------------------------------------------------------------------------
def sample(
    kind: str, name: str, namespace: str | None = "team-a", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A small object of a kind TauGrid uses (quantities as strings), for tests."""
    api_version = next(av for (av, k) in KINDS if k == kind)
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {"app": "taugrid-test"})}
    if KINDS[(api_version, kind)].namespaced:
        meta["namespace"] = namespace
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    container = {
        "name": "main",
        "image": "ghcr.io/acme/train:1.4",
        "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "500m", "memory": "16Gi"}},
    }
    pod_spec = {"restartPolicy": "Never", "containers": [container]}
    if kind == "Job":
        obj["spec"] = {"suspend": True, "backoffLimit": 0, "template": {"spec": pod_spec}}
    elif kind == "Service":
        obj["spec"] = {"clusterIP": "None", "selector": {"job-name": name}, "ports": []}
    elif kind == "Secret":
        obj["type"] = "Opaque"
        obj["data"] = {"token": "c2VjcmV0LXZhbHVl"}  # base64 "secret-value"
    elif kind == "RayJob":
        obj["spec"] = {
            "entrypoint": "python train.py",
            "suspend": True,
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {"headGroupSpec": {"template": {"spec": pod_spec}}},
        }
    elif kind == "Workload":
        obj["spec"] = {
            "queueName": "default",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": pod_spec}}],
        }
    elif kind == "LocalQueue":
        obj["spec"] = {"clusterQueue": "cluster-queue"}
    return obj
