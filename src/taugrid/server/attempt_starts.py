"""Starting admitted attempts, off the engine's thread.

A launch can take seconds: finding the resume point hashes the checkpoint (about 1 s per
GiB) and the local executor unpacks the code snapshot. Done in the engine's pass, that
would hold up every other run's transitions; here one thread of its own does it, in
admission order. The engine hands over an attempt once its admission is durable, skips
it while it is in flight, and applies a failed start as a decision on its next pass.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from taugrid.domain.states import Reason
from taugrid.ports.artifacts import ArtifactStore
from taugrid.ports.executor import AttemptKey, Executor, LaunchRequest, Placement
from taugrid.ports.secrets import SecretStore
from taugrid.server.diskspace import run_disk_limit
from taugrid.server.launching import find_resume, launch_request
from taugrid.store.runs import Row, RunStore

log = logging.getLogger("taugrid.engine")


class AttemptStarter:
    """``inline``: start in the caller's thread (in-process tests that step the engine
    by hand; the server always starts in the background)."""

    def __init__(
        self,
        store: RunStore,
        executor: Executor,
        artifacts: ArtifactStore,
        secrets: SecretStore,
        *,
        run_disk_limit_bytes: int | None = None,
        on_wanted: Callable[[str], None] = lambda run_id: None,
        inline: bool = False,
    ) -> None:
        self.store = store
        self.executor = executor
        self.artifacts = artifacts
        self.secrets = secrets
        self.run_disk_limit_bytes = run_disk_limit_bytes  # when resources.disk is not set
        # Asks the engine to look at a run soon: a start that failed, or one it passed over.
        self.on_wanted = on_wanted
        self.inline = inline
        self._lock = threading.Lock()
        self._in_flight: set[AttemptKey] = set()
        self._passed_over: set[AttemptKey] = set()  # looked at by the engine while in flight
        self._failed: dict[AttemptKey, str] = {}
        self._queue: queue.SimpleQueue[tuple[Row, int] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # Told of each launch (key, began, returned, whether it worked; the store's clock)
        # before the engine may look at the attempt again: the tracing (server/tracing.py).
        self.on_launched: Callable[[AttemptKey, float, float, bool], None] | None = None

    def start(self, run: Row, attempt: int) -> None:
        """Start ``attempt`` of ``run`` (a full row) unless it is already being started."""
        key = AttemptKey(run["id"], attempt)
        with self._lock:
            if key in self._in_flight:
                return
            self._in_flight.add(key)
        if self.inline:
            self._start(run, attempt)
            return
        self._queue.put((run, attempt))
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="tau-launch", daemon=True)
                self._thread.start()

    def in_flight(self, key: AttemptKey) -> bool:
        """Whether the attempt is being started; the engine passes it over meanwhile, and
        is asked to look again when the start is done."""
        with self._lock:
            if key in self._in_flight:
                self._passed_over.add(key)
                return True
            return False

    def busy(self) -> bool:
        """Whether a burst of attempts is being started (more than one in flight; one
        alone is a run somebody waits for, whose "running" must not wait for a pace)."""
        with self._lock:
            return len(self._in_flight) > 1

    def take_failures(self) -> dict[AttemptKey, str]:
        """Starts that failed since the last call: key -> why, for the engine to apply."""
        with self._lock:
            failed, self._failed = self._failed, {}
        return failed

    def close(self) -> None:
        self._queue.put(None)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            self._start(*item)

    def _start(self, run: Row, attempt: int) -> None:
        key = AttemptKey(run["id"], attempt)
        began = self.store.clock()
        try:
            self.executor.launch(self._request(run, attempt))
        except Exception as exc:  # a run that cannot start must fail visibly, not hang
            log.exception("launch of %s failed", run["id"])
            self._launched(key, began, ok=False)
            with self._lock:
                self._failed[key] = str(exc)
                self._in_flight.discard(key)
                self._passed_over.discard(key)
            self.on_wanted(key.run_id)  # the engine applies the failure on its next pass
        else:
            # A launch that worked needs no pass of its own (the attempt reports itself),
            # unless the engine looked at the run while it was in flight and passed it
            # over: its "running" may have come in meanwhile.
            self._launched(key, began, ok=True)
            with self._lock:
                self._in_flight.discard(key)
                missed = key in self._passed_over
                self._passed_over.discard(key)
            if missed:
                self.on_wanted(key.run_id)

    def _launched(self, key: AttemptKey, began: float, *, ok: bool) -> None:
        if self.on_launched is None:
            return
        try:
            self.on_launched(key, began, self.store.clock(), ok)
        except Exception:  # an observer must never hold back the start
            log.exception("a launch observer failed")

    def _request(self, run: Row, attempt: int) -> LaunchRequest:
        att = self.store.attempt(run["id"], attempt)
        placement = Placement.from_record(att["placement"] if att else {})
        # A hardware stop of the attempt before: checkpoints written after the fault are
        # not trusted (the GPU may have corrupted them before anyone noticed).
        before = self.store.attempt(run["id"], attempt - 1) if attempt > 0 else None
        fault_at = before.get("fault_at") if before else None
        resume = find_resume(self.artifacts, run["id"], fault_at)
        for info in resume.skipped:
            self.store.note(
                run["id"],
                Reason.CHECKPOINT_SKIPPED,
                f"checkpoint step {info.step} skipped for attempt {attempt}: {info.problem}",
            )
        if resume.best is not None:
            self.store.update_attempt(
                run["id"],
                attempt,
                resumed_from={"step": resume.best.step, "path": str(resume.best.path)},
            )
            log.info("%s attempt %d resumes from step %d", run["id"], attempt, resume.best.step)
        spec = run["spec_resolved"]
        return launch_request(
            run,
            attempt,
            placement,
            self.artifacts.workload_paths(AttemptKey(run["id"], attempt)),
            resume.resume_from,
            # Each reference resolves among the submitter's personal secrets in the run's
            # workspace, then the workspace's: never another workspace's. A secret
            # deleted since submit fails the attempt where it starts.
            self.secrets.workload_refs(
                run["workspace"], run["submitter"], spec.get("secrets") or {}, must_exist=False
            ),
            run_disk_limit(spec, self.run_disk_limit_bytes),
            resume_before=fault_at,
        )
