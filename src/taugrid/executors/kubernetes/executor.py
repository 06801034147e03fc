"""The Kubernetes executor: each attempt is a Job, an Indexed Job and its headless
Service, or a KubeRay RayJob, admitted by Kueue (``ports.executor`` is the contract).

- ``launch`` renders the attempt (``manifests.plan``: namespace, queue, priority, flavor
  constraints, storage, code fetch) and creates its objects in order, the code token's
  Secret first. Kueue sees the Job before TauGrid admits anything
  (``submits_before_admission``): the engine launches a queued run's next attempt, Kueue
  admits it (``admission_source``), the engine records the admission. A failure after
  the first object deletes what was made; a name already taken by this attempt's own
  object (a launch retried after a crash) is adopted. Jobs are created suspended and
  TauGrid never touches ``suspend``: only Kueue does.
- ``observe_many`` reads the informers' cache (``cluster_cache``) through the pure
  ``observe.observe``; it makes no API call.
- ``stop`` records the stop (``ledger``) and deletes the attempt's objects with
  foreground propagation on a thread of its own; the attempt has ended once its objects
  and pods are gone. ``retain`` deletes the attempts the engine no longer wants.
"""

from __future__ import annotations

import base64
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from taugrid.domain import code_tokens
from taugrid.domain.lifecycle import Observation, Phase
from taugrid.domain.outcomes import AttemptExit
from taugrid.domain.stops import StopReason
from taugrid.errors import TauError, UsageError
from taugrid.executors.kubernetes.admission_source import KueueAdmissionSource
from taugrid.executors.kubernetes.client import (
    AlreadyExists,
    JsonObject,
    KubeClient,
    KubeError,
    NotFound,
    ObjectRef,
    ServerError,
    TooManyRequests,
    Unreachable,
)
from taugrid.executors.kubernetes.cluster_cache import ClusterCache, attempt_key
from taugrid.executors.kubernetes.ledger import Entry, LaunchLedger
from taugrid.executors.kubernetes.logs import PodLogArchiver
from taugrid.executors.kubernetes.node_health import evict_pod
from taugrid.executors.kubernetes.observe import AttemptObjects, observe
from taugrid.executors.kubernetes.positions import QueuePositions
from taugrid.manifests.plan import (
    AttemptIdentity,
    ClusterTarget,
    attempt_input,
    check_submit,
    place,
    render_attempt,
)
from taugrid.manifests.workloads import QUEUE_LABEL, JobInput, SecretRef
from taugrid.policy.models import Policy
from taugrid.ports.executor import AttemptKey, Capabilities, LaunchRequest
from taugrid.spec.models import TauSpec
from taugrid.spec.modes import CLUSTER

log = logging.getLogger("taugrid.kubernetes")
# Stops whose pods leave through the Eviction API before their objects are deleted, and
# how long a disruption budget may hold one off (the delete thread waits meanwhile).
EVICTED_STOPS = frozenset({StopReason.HARDWARE, StopReason.DRAIN})
EVICT_STOP_DEADLINE_S = 120.0

# A queued attempt's objects exist before admission, and its code is fetched only once
# Kueue admits it: the token must outlive a long queue.
CODE_TOKEN_TTL_S = 14 * 24 * 3600.0
# The report token must outlive the attempt: the queue, then the run's own time limit
# (or a month, without one), then the sidecar's last words.
REPORT_TOKEN_TTL_S = 30 * 24 * 3600.0
SCHEME = "k8s://"
CREATE_TRIES = 6
RESUME_ENV = "TAU_RESUME_FROM"
CREATE_BUDGET_S = 30.0


class KubernetesExecutor:
    def __init__(
        self,
        client: KubeClient,
        target: ClusterTarget,
        policy: Callable[[], Policy],
        code_key: bytes,
        state_dir: Path,
        *,
        ray: bool = True,
        logs: PodLogArchiver | None = None,
        positions_every_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.logs = logs  # archives the pods' logs (KubeLogSource serves them)
        self._sleep = sleep
        self.target = target
        self._policy = policy
        self._code_key = code_key
        self._clock = clock
        self.ledger = LaunchLedger(state_dir / "attempts")
        # Called with an attempt's location when its objects change (engine.attempt_reported).
        self.notify: Callable[[str], None] | None = None
        self.admission = KueueAdmissionSource(self.ledger)
        self.positions = QueuePositions(client, self._waiting_in_kueue, positions_every_s)
        self.admission.positions = self.positions
        self.cache = ClusterCache(
            client,
            on_attempt=self._changed,
            on_workload=self.admission.workload_changed,
            on_pod=(lambda pod, deleted: logs.pod_seen(pod, deleted=deleted)) if logs else None,
            ray=ray,
            clock=clock,
        )
        self._deletions: queue.SimpleQueue[tuple[AttemptKey, bool] | None] = queue.SimpleQueue()
        self._deleting: set[AttemptKey] = set()
        self._lock = threading.Lock()
        self._deleter: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, sync_timeout_s: float = 30.0) -> None:
        """Start the informers and wait for their first lists: the engine's first pass
        must see what the cluster holds (nothing is launched twice after a restart)."""
        self.cache.start()
        if not self.cache.wait_synced(sync_timeout_s):
            log.warning("the cluster's objects were not all listed within %.0f s", sync_timeout_s)
        if self.logs is not None:  # a restarted server resumes every archive it was writing
            for key in self.ledger.attempts():
                entry = self.ledger.get(key)
                if entry is not None:
                    workload = self.cache.workload(key)
                    refs = _secret_refs_of(workload) if workload else []
                    self._follow_logs(key, entry.namespace, refs)
        self._deleter = threading.Thread(
            target=self._delete_loop, name="tau-k8s-delete", daemon=True
        )
        self._deleter.start()
        self.positions.start()

    def close(self) -> None:
        self._deletions.put(None)
        self.positions.stop()
        if self.logs is not None:
            self.logs.stop()
        self.cache.stop()
        self.client.close()

    # -- the port -------------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return CLUSTER

    submits_before_admission = True

    def is_launched(self, key: AttemptKey) -> bool:
        return self.ledger.get(key) is not None

    def check(self, spec: dict[str, Any]) -> None:
        check_submit(self._spec(spec), self._policy(), self.target)

    def preview(self, req: LaunchRequest) -> list[dict[str, Any]]:
        """The attempt's objects; its code token's Secret holds a placeholder."""
        return render_attempt(self._input(req))

    def launch(self, req: LaunchRequest) -> None:
        key = req.key
        if self.ledger.get(key) is not None:
            return
        inp = self._input(req)
        token = code_tokens.issue(
            self._code_key,
            req.snapshot_digest,
            req.run_id,
            req.attempt,
            self._clock(),
            ttl_s=CODE_TOKEN_TTL_S,
        )
        report_ttl = CODE_TOKEN_TTL_S + (inp.timeout_s or REPORT_TOKEN_TTL_S) + 3600.0
        report = code_tokens.issue_report(
            self._code_key, req.run_id, req.attempt, self._clock(), ttl_s=report_ttl
        )
        objects = render_attempt(inp, token, report)
        made: list[ObjectRef] = []
        try:
            for obj in objects:
                self._create(obj, key)
                made.append(ObjectRef.of(obj))
        except Exception:
            for ref in reversed(made):  # never a half-created attempt
                try:
                    self.client.delete(ref, propagation="Background")
                except KubeError as exc:
                    log.warning("could not delete %s after a failed launch: %s", ref, exc.message)
            raise
        workload = objects[-1]
        self.ledger.record(key, workload["kind"], inp.namespace, workload["metadata"]["name"])
        self.admission.attempt_recorded(key, self.cache.kueue_workload(key))
        self._follow_logs(key, inp.namespace, [(r.secret, r.key) for r in inp.secrets.values()])

    def observe_many(self, keys: list[AttemptKey]) -> dict[AttemptKey, Observation]:
        out: dict[AttemptKey, Observation] = {}
        now = self._clock()
        for key in keys:
            entry = self.ledger.get(key)
            if entry is None:
                out[key] = Observation(
                    Phase.EXITED,
                    finished_at=now,
                    exit=AttemptExit("lost", None, error="no record of its objects"),
                )
                continue
            try:
                out[key] = observe(self._objects(key, entry), entry.stop, now, entry.launched_at)
            except Exception as exc:  # one odd object must not stop every run's pass
                log.exception("observing %s failed", key)
                out[key] = Observation(
                    Phase.EXITED,
                    finished_at=now,
                    exit=AttemptExit("lost", None, error=f"its objects could not be read: {exc}"),
                )
        return out

    def stop(self, key: AttemptKey, reason: StopReason) -> bool:
        entry = self.ledger.get(key)
        if entry is None:
            return False
        ended = observe(self._objects(key, entry), None, self._clock(), entry.launched_at)
        self.ledger.stopped(key, reason)
        self._delete_later(key, forget=False)
        return ended.phase != Phase.EXITED

    def retain(self, wanted: set[AttemptKey]) -> None:
        for key in self.ledger.attempts():
            if key not in wanted:
                self._delete_later(key, forget=True)
        for key in self.cache.attempts():  # left by a launch that crashed midway
            if key not in wanted and self.ledger.get(key) is None:
                self._delete_later(key, forget=True)

    def location(self, key: AttemptKey) -> str:
        entry = self.ledger.get(key)
        if entry is not None:
            return f"{SCHEME}{entry.namespace}/{entry.kind.lower()}/{entry.name}"
        return f"{SCHEME}{key.run_id}-a{key.attempt}"

    def attempt_of(self, report: str) -> AttemptKey | None:
        if not report.startswith(SCHEME):
            return None
        name = report.rsplit("/", 1)[-1]
        run_id, sep, attempt = name.rpartition("-a")
        return AttemptKey(run_id, int(attempt)) if sep and attempt.isdigit() else None

    # -- launching ------------------------------------------------------------------------
    def _input(self, req: LaunchRequest) -> JobInput:
        spec = self._spec(req.spec)
        placement = place(spec, self._policy(), self.target)
        # The checkpoint the server chose (object storage: it reads the bucket), by its
        # step directory's name: the pod has it at its own path once fetch-resume ran.
        chosen = req.env.get(RESUME_ENV)
        step = PurePosixPath(chosen).name if chosen else None
        ident = AttemptIdentity(req.run_id, req.attempt, req.snapshot_digest, step)
        secrets = {env: _secret_ref(ref) for env, ref in req.secret_refs.items()}
        inp = attempt_input(spec, ident, placement, self.target, secrets)
        # The environment the engine built (TAU_* at the pod's paths, the spec's env
        # expanded), the resume point at the pod's path: the device plugin sets the GPUs.
        env = {k: v for k, v in req.env.items() if k != "CUDA_VISIBLE_DEVICES"}
        if step:
            env[RESUME_ENV] = inp.env[RESUME_ENV]
        return JobInput(**{**inp.__dict__, "env": env})

    @staticmethod
    def _spec(data: dict[str, Any]) -> TauSpec:
        try:
            return TauSpec.model_validate(data)
        except ValueError as exc:
            raise UsageError(f"the run's recorded spec no longer validates: {exc}") from None

    def _create(self, obj: JsonObject, key: AttemptKey) -> None:
        """Create, retrying what is safe: the client never retries a create (its answer
        may be lost after it happened), so after a 5xx or no answer the object is read
        back first; a 429 was not processed and is simply sent again."""
        ref = ObjectRef.of(obj)
        started = time.monotonic()
        for attempt in range(CREATE_TRIES):
            try:
                self.client.create(obj)
                return
            except AlreadyExists:
                break  # ours from a launch cut short, or someone else's: see below
            except (TooManyRequests, ServerError, Unreachable) as exc:
                last = attempt == CREATE_TRIES - 1
                if last or time.monotonic() - started > CREATE_BUDGET_S:
                    raise
                delay = min(5.0, 0.2 * 2**attempt)
                if isinstance(exc, TooManyRequests) and exc.retry_after is not None:
                    delay = max(delay, exc.retry_after)
                self._sleep(delay)
                if isinstance(exc, TooManyRequests):
                    continue
                try:
                    live = self.client.get(ref)
                except NotFound:
                    continue
                if attempt_key(live) == key:
                    return  # it was created; the answer was lost
        live = self.client.get(ref)  # NotFound here: it went meanwhile, the launch fails
        if attempt_key(live) != key:
            raise TauError(f"{ref} already exists and is not this attempt's") from None

    def _follow_logs(self, key: AttemptKey, namespace: str, refs: list[tuple[str, str]]) -> None:
        """Archive the attempt's pods' logs, masking its secrets' values (read here, kept
        only by the masker, never logged)."""
        if self.logs is None:
            return
        values = []
        for secret, item in refs:
            try:
                obj = self.client.get(ObjectRef("v1", "Secret", namespace, secret))
            except KubeError:
                continue  # missing: the pod cannot start and prints nothing of it
            raw = (obj.get("data") or {}).get(item)
            if raw:
                values.append(base64.b64decode(raw).decode(errors="replace"))
        self.logs.follow(key, namespace, secrets=values)

    # -- observing ------------------------------------------------------------------------
    def _objects(self, key: AttemptKey, entry: Entry) -> AttemptObjects:
        return AttemptObjects(
            kind=entry.kind,
            workload=self.cache.workload(key),
            pods=self.cache.pods(key),
            kueue=self.cache.kueue_workload(key),
            waiting_since=self.cache.waiting_since(key),
        )

    def _waiting_in_kueue(self) -> list[tuple[AttemptKey, str, str, str]]:
        """(attempt, namespace, name, LocalQueue) of each attempt Kueue holds suspended."""
        out = []
        for key in self.ledger.attempts():
            entry = self.ledger.get(key)
            obj = self.cache.workload(key)
            if entry is None or entry.stop is not None or obj is None:
                continue
            if not (obj.get("spec") or {}).get("suspend"):
                continue
            queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
            if queue:
                out.append((key, entry.namespace, entry.name, str(queue)))
        return out

    def _changed(self, key: AttemptKey) -> None:
        if self.notify is not None:
            self.notify(self.location(key))

    # -- deleting -------------------------------------------------------------------------
    def _delete_later(self, key: AttemptKey, *, forget: bool) -> None:
        with self._lock:
            if key in self._deleting:
                return
            self._deleting.add(key)
        self._deletions.put((key, forget))

    def _delete_loop(self) -> None:
        while (item := self._deletions.get()) is not None:
            key, forget = item
            try:
                self._delete(key)
                if forget:  # the engine is done with it (retain), not a stop still to end
                    self.ledger.forget(key)
                    if self.logs is not None:
                        self.logs.release(key)
            except Exception:
                log.exception("deleting the objects of %s failed; retried later", key)
            finally:
                with self._lock:
                    self._deleting.discard(key)

    def _delete(self, key: AttemptKey) -> None:
        """Delete the attempt's objects, the workload object first (foreground: its pods
        go before it does)."""
        entry = self.ledger.get(key)
        name = entry.name if entry is not None else f"{key.run_id}-a{key.attempt}"
        namespace = entry.namespace if entry is not None else self._namespace_of(key)
        if namespace is None:
            return
        if entry is not None and entry.stop in EVICTED_STOPS:
            # A hardware fault or a drain takes the pods off through the Eviction API
            # first, so a PodDisruptionBudget is heard (bounded: the GPU is faulty).
            for pod in self.cache.pods(key):
                meta = pod.get("metadata") or {}
                evict_pod(
                    self.client,
                    meta.get("namespace") or namespace,
                    meta["name"],
                    EVICT_STOP_DEADLINE_S,
                    clock=self._clock,
                    sleep=self._sleep,
                )
        kinds = [("batch/v1", "Job"), ("ray.io/v1", "RayJob")]
        if entry is not None:
            kinds = [k for k in kinds if k[1] == entry.kind]
        for api_version, kind in kinds:
            self.client.delete(ObjectRef(api_version, kind, namespace, name))
        for ref in (
            ObjectRef("v1", "Service", namespace, name),
            ObjectRef("v1", "Secret", namespace, f"{name}-code"),
        ):
            self.client.delete(ref, propagation="Background")

    def _namespace_of(self, key: AttemptKey) -> str | None:
        obj = self.cache.workload(key)
        pods = self.cache.pods(key)
        source = obj or (pods[0] if pods else None)
        if source is None:
            return None
        return (source.get("metadata") or {}).get("namespace")


def _secret_refs_of(workload: JsonObject) -> list[tuple[str, str]]:
    """The (Secret, key) pairs a rendered Job's or RayJob's containers read."""
    found: list[tuple[str, str]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            ref = node.get("secretKeyRef")
            if isinstance(ref, dict) and ref.get("name") and ref.get("key"):
                found.append((str(ref["name"]), str(ref["key"])))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(workload.get("spec") or {})
    return sorted(set(found))


def _secret_ref(ref: str) -> SecretRef:
    """``secret/key`` as the cluster's SecretStore answers a reference."""
    secret, _, key = ref.partition("/")
    return SecretRef(secret, key or "value")
