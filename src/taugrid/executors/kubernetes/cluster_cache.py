"""What the cluster holds of TauGrid's attempts, kept current by informers: the Jobs and
RayJobs TauGrid made, their pods, and Kueue's Workloads for them, indexed by attempt.

Four list-then-watch informers (``informer.py``) over all namespaces. Objects are matched
to attempts by the labels TauGrid renders (``taugrid.io/run-id``, ``taugrid.io/attempt``)
and a Workload to its Job by its owner reference (kind and name, and uid where both have
one), never by a computed Workload name. Label selectors are sent, and applied here too:
a real API server filters, an emulator may not, and neither may decide what is ours.

``on_attempt`` is called (on an informer thread) with the attempt whose objects changed;
``on_workload`` with the attempt and its Workload after a change (None: deleted).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from taugrid.executors.kubernetes.client import JsonObject, KubeClient, WatchEvent
from taugrid.executors.kubernetes.informer import Informer
from taugrid.executors.kubernetes.status import pod_view
from taugrid.manifests.workloads import MANAGED_BY
from taugrid.ports.executor import AttemptKey

RUN_LABEL = "taugrid.io/run-id"
ATTEMPT_LABEL = "taugrid.io/attempt"
WORKLOADS = ("batch/v1", "Job"), ("ray.io/v1", "RayJob")
KUEUE_WORKLOAD = ("kueue.x-k8s.io/v1beta2", "Workload")

ObjKey = tuple[str | None, str]  # (namespace, name)


def attempt_key(obj: Mapping[str, Any]) -> AttemptKey | None:
    """The attempt an object TauGrid made belongs to (None for anyone else's)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in MANAGED_BY.items()):
        return None
    run_id, attempt = labels.get(RUN_LABEL), labels.get(ATTEMPT_LABEL)
    if not run_id or not attempt or not str(attempt).isdigit():
        return None
    return AttemptKey(str(run_id), int(attempt))


def _ref(obj: Mapping[str, Any]) -> ObjKey:
    meta = obj.get("metadata") or {}
    return meta.get("namespace"), str(meta.get("name", ""))


def owner_of(workload: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
    """(kind, name, uid) of the Job or RayJob a Kueue Workload was made for."""
    for owner in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") in ("Job", "RayJob") and owner.get("name"):
            return str(owner["kind"]), str(owner["name"]), owner.get("uid")
    return None


class ClusterCache:
    def __init__(
        self,
        client: KubeClient,
        *,
        on_attempt: Callable[[AttemptKey], None],
        on_workload: Callable[[AttemptKey, JsonObject | None], None],
        on_pod: Callable[[JsonObject, bool], None] | None = None,
        ray: bool = True,
        resync_s: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._on_attempt = on_attempt
        self._on_pod = on_pod  # (pod, deleted): the log archiver follows pods it sees
        self._on_workload = on_workload
        self._clock = clock
        self._lock = threading.Lock()
        self._objects: dict[AttemptKey, JsonObject] = {}
        self._by_name: dict[ObjKey, AttemptKey] = {}
        self._pods: dict[AttemptKey, dict[str, JsonObject]] = {}
        self._kueue: dict[AttemptKey, JsonObject] = {}
        self._kueue_owner: dict[ObjKey, AttemptKey] = {}  # Workload -> attempt
        self._waiting: dict[str, tuple[str, float]] = {}  # pod -> (reason, since)
        kinds = WORKLOADS if ray else WORKLOADS[:1]
        own = dict(MANAGED_BY)
        self.informers = [
            Informer(
                client, av, kind, on_change=self._workload_object, labels=own, resync_s=resync_s
            )
            for av, kind in kinds
        ]
        self.informers.append(
            Informer(client, "v1", "Pod", on_change=self._pod, labels=own, resync_s=resync_s)
        )
        self.informers.append(
            Informer(client, *KUEUE_WORKLOAD, on_change=self._kueue_workload, resync_s=resync_s)
        )

    def start(self) -> None:
        for informer in self.informers:
            informer.start()

    def wait_synced(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(i.wait_synced(max(0.0, deadline - time.monotonic())) for i in self.informers)

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    # -- reads (any thread) ---------------------------------------------------------------
    def workload(self, key: AttemptKey) -> JsonObject | None:
        with self._lock:
            return self._objects.get(key)

    def pods(self, key: AttemptKey) -> list[JsonObject]:
        with self._lock:
            return list((self._pods.get(key) or {}).values())

    def kueue_workload(self, key: AttemptKey) -> JsonObject | None:
        with self._lock:
            return self._kueue.get(key)

    def waiting_since(self, key: AttemptKey) -> dict[str, float]:
        with self._lock:
            names = self._pods.get(key) or {}
            return {n: self._waiting[n][1] for n in names if n in self._waiting}

    def attempts(self) -> set[AttemptKey]:
        """Every attempt with a workload object or a pod in the cluster."""
        with self._lock:
            return set(self._objects) | {k for k, pods in self._pods.items() if pods}

    # -- informer callbacks ---------------------------------------------------------------
    def _workload_object(self, event: WatchEvent) -> None:
        key = attempt_key(event.object)
        if key is None:
            return
        with self._lock:
            if event.type == "DELETED":
                self._objects.pop(key, None)
                self._by_name.pop(_ref(event.object), None)
            else:
                self._objects[key] = event.object
                self._by_name[_ref(event.object)] = key
        self._on_attempt(key)

    def _pod(self, event: WatchEvent) -> None:
        key = attempt_key(event.object)
        if key is None:
            return
        name = _ref(event.object)[1]
        with self._lock:
            pods = self._pods.setdefault(key, {})
            if event.type == "DELETED":
                pods.pop(name, None)
                self._waiting.pop(name, None)
                if not pods:
                    del self._pods[key]
            else:
                pods[name] = event.object
                reason = pod_view(event.object).waiting
                held = self._waiting.get(name)
                if reason is None:
                    self._waiting.pop(name, None)
                elif held is None or held[0] != reason:
                    self._waiting[name] = (reason, self._clock())
        if self._on_pod is not None:
            self._on_pod(event.object, event.type == "DELETED")
        self._on_attempt(key)

    def _kueue_workload(self, event: WatchEvent) -> None:
        ref = _ref(event.object)
        with self._lock:
            key = self._kueue_owner.get(ref)
            if key is None:
                key = self._owner_key(event.object)
                if key is None:
                    return
                self._kueue_owner[ref] = key
            if event.type == "DELETED":
                self._kueue.pop(key, None)
                self._kueue_owner.pop(ref, None)
                after = None
            else:
                self._kueue[key] = after = event.object
        self._on_workload(key, after)
        self._on_attempt(key)

    def _owner_key(self, workload: JsonObject) -> AttemptKey | None:
        owner = owner_of(workload)
        if owner is None:
            return None
        _kind, name, uid = owner
        key = self._by_name.get(((workload.get("metadata") or {}).get("namespace"), name))
        if key is not None and uid:
            job_uid = (self._objects[key].get("metadata") or {}).get("uid")
            if job_uid and job_uid != uid:
                return None  # a Workload of an earlier object of the same name
        if key is None:
            # The Workload came before its Job reached the cache: our names say whose.
            run_id, sep, attempt = name.rpartition("-a")
            if not sep or not attempt.isdigit():
                return None
            key = AttemptKey(run_id, int(attempt))
        return key
