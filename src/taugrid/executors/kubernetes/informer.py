"""An informer: a cache of one kind's objects (in one namespace, or all) kept current by
list-then-watch, calling back once per change, with no change missed or repeated.

It lists, remembers the list's resourceVersion, and watches from it; a stream that ends
(server timeout, cut connection) is watched again from the last version seen; a 410 Gone
(the version is too old) or any error means a relist, whose difference from the cache is
emitted as synthetic ADDED/MODIFIED/DELETED events; and every ``resync_s`` it relists
anyway, so a change lost in any way is found.

It never trusts versions further than the server shows them: objects are compared, not
versions (an ADDED for an object the cache holds unchanged is no change), and when the
objects carry no resourceVersion (kmock, some fakes), there is nothing to resume from, so a
stream that ends is followed by a relist instead of a resumed watch. The callback runs on
the informer's own daemon thread, in order; ``stop()`` closes the open stream from the
caller's thread, so it returns promptly.

The pure parts (``diff``, ``reconcile``, ``resume_version``) are functions of plain data.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from taugrid.executors.kubernetes.client import (
    Gone,
    JsonObject,
    KubeClient,
    KubeError,
    WatchEvent,
    WatchStream,
)

log = logging.getLogger(__name__)

Key = tuple[str | None, str]  # (namespace, name)


# -- pure parts ----------------------------------------------------------------------------
def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace"), str(meta.get("name", ""))


def _version(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion") or None


def diff(old: Mapping[Key, JsonObject], new: Mapping[Key, JsonObject]) -> list[WatchEvent]:
    """The events that turn cache ``old`` into ``new``, in key order (DELETED carry the
    last object ``old`` held)."""
    events: list[WatchEvent] = []
    for key in sorted(old.keys() | new.keys(), key=lambda k: (k[0] or "", k[1])):
        if key not in new:
            events.append(WatchEvent("DELETED", old[key]))
        elif key not in old:
            events.append(WatchEvent("ADDED", new[key]))
        elif old[key] != new[key]:
            events.append(WatchEvent("MODIFIED", new[key]))
    return events


def reconcile(cache: Mapping[Key, JsonObject], event: WatchEvent) -> WatchEvent | None:
    """What a watch event changes in ``cache``: None for no change (a replayed ADDED, a
    DELETED of an object never seen, a BOOKMARK), else the event as the cache sees it."""
    if event.type == "BOOKMARK":
        return None
    key = key_of(event.object)
    held = cache.get(key)
    if event.type == "DELETED":
        return event if held is not None else None
    if held is None:
        return WatchEvent("ADDED", event.object)
    if held == event.object:
        return None
    return WatchEvent("MODIFIED", event.object)


def resume_version(objects: Iterable[JsonObject], list_version: str | None) -> str | None:
    """The list's resourceVersion, if it can be trusted: a server that gives objects no
    version (kmock) cannot resume a watch from one either."""
    if not list_version or any(_version(obj) is None for obj in objects):
        return None
    return list_version


# -- the informer --------------------------------------------------------------------------
class Informer:
    """See the module docstring. ``on_change`` gets each change as a WatchEvent."""

    def __init__(
        self,
        client: KubeClient,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        on_change: Callable[[WatchEvent], None],
        labels: dict[str, str] | None = None,
        resync_s: float = 300.0,
        watch_timeout_s: float = 300.0,
        backoff_s: float = 0.5,
        backoff_cap_s: float = 30.0,
    ) -> None:
        self._client = client
        self._api_version = api_version
        self._kind = kind
        self._namespace = namespace
        self._labels = labels
        self._on_change = on_change
        self._resync_s = resync_s
        self._watch_timeout_s = watch_timeout_s
        self._backoff_s = backoff_s
        self._backoff_cap_s = backoff_cap_s
        self._cache: dict[Key, JsonObject] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None
        self._resume: str | None = None
        self.relists = 0  # how many lists it made (for tests and metrics)
        self.watches = 0

    @property
    def name(self) -> str:
        return f"informer {self._kind} {self._namespace or '(all namespaces)'}"

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop and wait (at most ``timeout_s``) for the thread; no callback after this."""
        with self._lock:
            self._stopping.set()
            stream = self._stream
        if stream is not None:
            _close(stream)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def wait_synced(self, timeout_s: float) -> bool:
        """True once the first list is in the cache."""
        return self._synced.wait(timeout_s)

    def snapshot(self) -> dict[Key, JsonObject]:
        """The cache now (the objects are shared: do not change them)."""
        with self._lock:
            return dict(self._cache)

    def get(self, namespace: str | None, name: str) -> JsonObject | None:
        with self._lock:
            return self._cache.get((namespace, name))

    # -- the loop ---------------------------------------------------------------------------
    def _run(self) -> None:
        must_list = True
        failures = 0
        next_resync = 0.0
        while not self._stopping.is_set():
            try:
                if must_list or time.monotonic() >= next_resync:
                    self._relist()
                    next_resync = time.monotonic() + self._resync_s
                    must_list = False
                started = time.monotonic()
                seen = self._watch_once(next_resync)
                # Nothing to resume from: a resumed watch could miss a deletion.
                must_list = self._resume is None
                failures = 0
                if not seen and time.monotonic() - started < 1.0:
                    failures = 1  # a stream that ends at once, again and again: slow down
            except Gone:
                must_list = True
                continue
            except KubeError as exc:
                log.warning("%s: %s", self.name, exc.message)
                must_list = True
                failures += 1
            except Exception:
                log.exception("%s: unexpected error", self.name)
                must_list = True
                failures += 1
            if failures:
                delay = min(self._backoff_cap_s, self._backoff_s * 2 ** (failures - 1))
                self._stopping.wait(delay)

    def _relist(self) -> None:
        listed = self._client.list(self._api_version, self._kind, self._namespace, self._labels)
        fresh = {key_of(obj): obj for obj in listed.items}
        with self._lock:
            if self._stopping.is_set():
                return
            events = diff(self._cache, fresh)
            self._cache = fresh
        self._resume = resume_version(listed.items, listed.resource_version)
        self.relists += 1
        self._synced.set()
        for event in events:
            self._emit(event)

    def _watch_once(self, next_resync: float) -> bool:
        """One watch stream, to its end; True if it brought any event."""
        timeout = max(1.0, min(self._watch_timeout_s, next_resync - time.monotonic()))
        stream = self._client.watch(
            self._api_version,
            self._kind,
            self._namespace,
            resource_version=self._resume,
            labels=self._labels,
            timeout_s=timeout,
        )
        with self._lock:
            if self._stopping.is_set():
                _close(stream)
                return False
            self._stream = stream
        self.watches += 1
        seen = False
        try:
            for event in stream:
                if self._stopping.is_set():
                    break
                seen = True
                self._resume = _version(event.object)
                with self._lock:
                    change = reconcile(self._cache, event)
                    if change is not None and change.type == "DELETED":
                        self._cache.pop(key_of(change.object), None)
                    elif change is not None:
                        self._cache[key_of(change.object)] = change.object
                if change is not None:
                    self._emit(change)
        finally:
            with self._lock:
                self._stream = None
            _close(stream)
        return seen

    def _emit(self, event: WatchEvent) -> None:
        if self._stopping.is_set():
            return
        try:
            self._on_change(event)
        except Exception:
            log.exception("%s: the change callback failed on %s", self.name, event.type)


def _close(stream: WatchStream) -> None:
    # A generator running on the informer's thread refuses (ValueError): it ends at its
    # timeout instead.
    with contextlib.suppress(ValueError):
        stream.close()
