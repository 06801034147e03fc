"""The control loop: observe → decide (pure functions in ``domain``) → apply.

One thread owns every transition after submission, so the order of events for a run is
the order things happened. API handlers only record requests (submit, cancel, a stop)
and wake the loop. Each pass gathers the facts of the active runs, asks the executor
what it observes of their attempts (``observe_many``), gets a ``Decision`` per run from
``domain.lifecycle`` and applies it: the transitions in one commit, then the effects
(launch, stop, tidy), each idempotent. Admission is the strategy's (``admission.py``);
launches run on their own thread (``attempt_starts.py``). On start the first pass
re-adopts live attempts and finalises those that ended while the server was down.

The engine sees only ports (``taugrid.ports``): which executor, artifact store and
secret store it drives is decided by the composition root, ``server/app.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from taugrid.domain.lifecycle import (
    AttemptFacts,
    Decision,
    Observation,
    Phase,
    Step,
    on_admitted,
    on_observation,
    on_restart_due,
    on_start_failed,
    on_submit_failed,
    stop_to_send,
    stopped_before_launch,
)
from taugrid.domain.restarts import RestartPolicy
from taugrid.domain.scheduling import Pending
from taugrid.domain.states import RunState
from taugrid.domain.stops import StopReason, StopRequest, parse_stop_reason
from taugrid.ports.artifacts import ArtifactStore
from taugrid.ports.devices import DeviceInventory
from taugrid.ports.executor import AttemptKey, Executor
from taugrid.ports.secrets import SecretStore
from taugrid.server.admission import AdmissionStrategy
from taugrid.server.attempt_starts import AttemptStarter
from taugrid.server.changes import RunChanges
from taugrid.server.diskspace import DiskSpace, is_disk_full
from taugrid.server.housekeeping import Housekeeping
from taugrid.server.launching import restart_policy_of
from taugrid.server.run_files import MetricsTracker
from taugrid.store.runs import Move, Row, RunStore, Transition

log = logging.getLogger("taugrid.engine")
MIN_PASS_INTERVAL_S = 0.01
MIN_PASS_INTERVAL_BUSY_S = 0.05  # while a burst of attempts is being started (see _loop)
RESCHEDULE_EVERY_S = 2.0
S = RunState


@dataclasses.dataclass(frozen=True)
class _Queued:
    """A transition waiting for the pass's commit, and what to do once it is durable."""

    move: Move
    then: Callable[[Row], None] | None


class RunEngine:
    def __init__(
        self,
        store: RunStore,
        executor: Executor,
        admission: AdmissionStrategy,
        *,
        artifacts: ArtifactStore,
        secrets: SecretStore,
        devices: DeviceInventory | None = None,
        poll_interval_s: float = 0.5,
        retention_s: float | None = None,
        disk: DiskSpace | None = None,
        run_disk_limit_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
        starts_inline: bool = False,
    ) -> None:
        self.store = store
        self.executor = executor
        self.admission = admission
        self.artifacts = artifacts
        self.devices = devices
        self.metrics = MetricsTracker(artifacts)
        self.starter = AttemptStarter(
            store,
            executor,
            artifacts,
            secrets,
            run_disk_limit_bytes=run_disk_limit_bytes,
            on_wanted=self._look_again,
            inline=starts_inline,
        )
        self.housekeeping = Housekeeping(store, artifacts, retention_s, clock)
        # The last admission cycle's explanation for every queued run (position, reason);
        # derived state, recomputed on each cycle, so it needs no storage.
        self.pending: Mapping[str, Pending] = {}
        # Where each active run's attempt stands as its executor sees it, in words (a
        # cluster's phases: scheduling, pulling the image, running...); derived state.
        self.progress: dict[str, str] = {}
        self.changes = RunChanges()  # woken after each commit with the runs that moved
        self._dirty = True
        self._scheduled_at = 0.0
        self._devices_seen = devices.version if devices is not None else 0
        # Reconciling every active run costs a few file reads and /proc looks each; a pass
        # woken by the executor's pushes reconciles only the runs that pushed, and every
        # active run is looked at on any other wake-up and at least every poll interval.
        self._full_wanted = True
        self._reconciled_all_at = 0.0
        self._reported: set[str] = set()
        self._reported_lock = threading.Lock()
        self.poll_interval_s = poll_interval_s
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._stops_sent: set[AttemptKey] = set()
        self._lost_noted: set[AttemptKey] = set()  # SupervisorLost events written
        self._failing: set[str] = set()  # runs whose step raised (logged once each)
        # This pass's transitions, committed together (RunStore.transition_many).
        self._queued: list[_Queued] = []
        self._moved = 0  # transitions this pass wrote (a pass that wrote none rests longer)
        # Each launched run's restart policy (from its spec), so that deciding about an
        # attempt needs no read of the full row; filled again from the row after a restart.
        self._restart_policies: dict[str, RestartPolicy] = {}
        self.disk = disk
        self._thread: threading.Thread | None = None
        # Observers (the metrics, the tracing): each committed batch of transitions with
        # the runs as recorded (observe_moves), and each pass's wall time.
        self._move_observers: list[Callable[[list[tuple[Move, Row]]], None]] = []
        self.on_pass: Callable[[float], None] | None = None

    def observe_moves(self, observer: Callable[[list[tuple[Move, Row]]], None]) -> None:
        """Tell ``observer`` of each committed batch, after those already watching; one
        that fails is logged, and the others are still told."""
        self._move_observers.append(observer)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tau-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=10)
        self.starter.close()

    def wake(self, *, reschedule: bool = True) -> None:
        """Run a pass soon. ``reschedule=False`` only needs the executor reconciled; a
        transition found there reschedules by itself."""
        if reschedule:
            self._dirty = True
        self._full_wanted = True
        self._wake.set()

    def attempt_reported(self, report: str) -> None:
        """The executor's side pushed a status change: reconcile its run in a pass soon
        (only it, when nothing else asks for more). The push says which attempt; what it
        reports is what the executor observes, the truth, not the push."""
        found = self.executor.attempt_of(report)
        if found is None:
            self.wake(reschedule=False)
            return
        self._look_again(found.run_id)

    def runs_changed(self, run_ids: Iterable[str]) -> None:
        """Runs were changed outside the engine (submitted, cancelled, resumed): a pass
        soon, and whoever waits on them (a followed log, the event feed) is woken now."""
        self.wake()
        self.changes.notify(run_ids)

    def _look_again(self, run_id: str) -> None:
        with self._reported_lock:
            self._reported.add(run_id)
        self._wake.set()

    def request_stop(
        self, run_id: str, reason: StopReason, message: str, *, fault_at: float | None = None
    ) -> bool:
        """Stop the run's current attempt for ``reason`` (preemption, a hardware fault, a
        drain), recorded durably before anything is sent; what follows (requeue, restart
        from a checkpoint before ``fault_at``) is decided when the attempt has ended.
        False when the run has no attempt to stop, or a person's cancel is pending."""
        stop = StopRequest(reason, self.clock(), message, fault_at=fault_at)
        done = self.store.request_stop(run_id, stop)
        if done:
            self.wake()
        return done

    def _loop(self) -> None:
        started, ended, cost, idle = 0.0, 0.0, 0.0, False
        while not self._stop.is_set():
            # A burst of wake-ups (many submits) becomes one pass, not one each: passes
            # start at least twice their CPU cost apart (MIN_PASS_INTERVAL_S at least),
            # so a deep queue can't starve the API of the GIL. A pass that moved no run
            # (a burst of submits into a full queue: each pass reads the whole queue and
            # admits nothing) rests twice its cost after it ends instead, so it takes at
            # most a third of the GIL, not half (the burst's submits/s: 1.3-1.6x). A pass
            # that moves runs keeps its pace: short runs need it. CPU, not wall time: a
            # pass that waits on fsyncs or process spawns holds no GIL, and spacing by
            # that would idle the engine.
            now = time.monotonic()
            rest = 2 * cost - (now - ended) if idle else 2 * cost - (now - started)
            # While a burst of attempts is being started, passes come at most every 50 ms:
            # each records what the last launches did in one commit, and leaves the
            # starter the GIL and the disk (a pass per push cut a burst's launch rate by
            # a sixth). One launch alone keeps the usual pace: its user is waiting.
            least = MIN_PASS_INTERVAL_BUSY_S if self.starter.busy() else MIN_PASS_INTERVAL_S
            gap = max(least - (now - started), rest)
            if gap > 0:
                self._stop.wait(gap)
            started = time.monotonic()
            cpu = time.thread_time()
            self._moved = 0
            self._wake.clear()
            try:
                self.step()
            except Exception as exc:  # the loop must outlive any one bad run or DB hiccup
                if self.disk is not None and is_disk_full(exc):
                    self.disk.note_full()  # the reserve goes back for the state changes
                log.exception("engine pass failed")
            cost = time.thread_time() - cpu
            ended = time.monotonic()
            if self.on_pass is not None:
                self.on_pass(ended - started)
            idle = self._moved == 0
            self._wake.wait(self.poll_interval_s)

    # -- one pass -----------------------------------------------------------------------
    def step(self) -> None:
        """One pass: reconcile what the executor observes, requeue restarts, admit.

        Each phase's transitions are committed together in one transaction (one fsync
        for a burst of runs starting or ending instead of one each) before anything acts
        on them: a run is launched only once its admission is durable."""
        self._queued.clear()  # left over only by a pass that failed: nothing was written
        if self.disk is not None:
            self.disk.maintain()
        with self._reported_lock:
            reported, self._reported = self._reported, set()
        failed = self.starter.take_failures()
        now = time.monotonic()
        if failed or self._full_wanted or now - self._reconciled_all_at >= self.poll_interval_s:
            self._full_wanted = False
            self._reconciled_all_at = now
            active = self.store.in_states([S.ADMITTED, S.RUNNING], light=True)
        elif reported:
            active = self.store.in_states([S.ADMITTED, S.RUNNING], light=True, ids=reported)
        else:
            active = []
        self._reconcile(active, failed)
        if failed:
            self._submit_failures(failed, {r["id"] for r in active})
        self._commit()
        # After that commit: an attempt that just failed may restart at once (backoff 0).
        for run in self.store.in_states([S.RESTARTING], light=True):
            step = on_restart_due(run["attempt_count"], run["next_attempt_at"], self.clock())
            if step is not None:
                self._move(run, step)
        self._commit()
        # Admission is the costly part of a pass; it is needed only when a run arrived,
        # left or changed queue, the policy or the devices changed, the admitter said
        # something (and now and then, as a safety net).
        if self.devices is not None and self.devices.version != self._devices_seen:
            self._devices_seen = self.devices.version
            self._dirty = True
        if (
            self._dirty
            or self.admission.has_news()
            or time.monotonic() - self._scheduled_at > RESCHEDULE_EVERY_S
        ):
            self._dirty = False
            self._scheduled_at = time.monotonic()
            self._admit()
            self._commit()
        self.housekeeping.sweep()

    def _isolated(self, step: Callable[[Row], None], run: Row) -> None:
        """One run's step; what goes wrong with it (its workload controls files the engine
        reads) is logged once and must not stop the pass for every other run. A full disk
        is the exception: it concerns everyone, so the pass stops for the loop to handle."""
        try:
            step(run)
        except Exception as exc:
            if is_disk_full(exc):
                raise
            if run["id"] not in self._failing:
                self._failing.add(run["id"])
                log.exception("engine step for run %s failed; other runs go on", run["id"])
        else:
            self._failing.discard(run["id"])

    def _reconcile(self, active: list[Row], failed: dict[AttemptKey, str]) -> None:
        """Stops sent, launches handed over, then one look at every launched attempt."""
        observed: list[tuple[Row, AttemptFacts]] = []
        for run in active:
            facts = self._facts(run)
            key = AttemptKey(run["id"], facts.attempt)
            if key in failed:
                self._apply(run, on_start_failed(failed[key], self.clock()))
                continue
            # In flight first: a start that ends between the two looks is launched.
            if self.starter.in_flight(key):
                continue
            if not self.executor.is_launched(key):
                self._isolated(functools.partial(self._not_launched, facts=facts), run)
                continue
            reason = stop_to_send(facts)
            if reason is not None and key not in self._stops_sent:
                self._isolated(functools.partial(self._send_stop, key=key, reason=reason), run)
            observed.append((run, facts))
        if not observed:
            return
        seen = self.executor.observe_many([AttemptKey(r["id"], f.attempt) for r, f in observed])
        for run, facts in observed:
            obs = seen[AttemptKey(run["id"], facts.attempt)]
            self._isolated(functools.partial(self._observed, facts=facts, obs=obs), run)

    def _send_stop(self, run: Row, key: AttemptKey, reason: StopReason) -> None:
        self.executor.stop(key, reason)
        self._stops_sent.add(key)

    def _not_launched(self, run: Row, facts: AttemptFacts) -> None:
        if stop_to_send(facts) is not None:  # stopped before it ever started
            self._apply(run, stopped_before_launch(facts, self.clock()))
            return
        full = self.store.get(run["id"])  # admitted, then the server died before launching
        if full is not None:
            self._start(full, facts.attempt)

    def _observed(self, run: Row, facts: AttemptFacts, obs: Observation) -> None:
        key = AttemptKey(run["id"], facts.attempt)
        decision = on_observation(facts, obs, self.clock())
        if obs.detail and obs.phase != Phase.EXITED:
            self.progress[run["id"]] = obs.detail
        else:
            self.progress.pop(run["id"], None)
        if obs.phase == Phase.STOPPING:
            self._lost_noted.add(key)
        else:
            self._lost_noted.discard(key)
        if obs.phase == Phase.EXITED:
            self._stops_sent.discard(key)
        if decision.track_metrics:
            latest = self.metrics.poll(run["id"], facts.attempt, run["metrics_last"])
            if latest is not None:
                self.store.update_fields(run["id"], metrics_last=latest)
        self._apply(run, decision)

    def _apply(self, run: Row, decision: Decision) -> None:
        """Queue the decision's transitions for the commit; its note is written now."""
        if decision.note is not None:
            self.store.note(run["id"], *decision.note)
        extra: dict[str, object] = {}
        if decision.final_metrics:  # the last metrics ride with the end, in its commit
            attempt = run["attempt_count"] - 1
            latest = self.metrics.poll(run["id"], attempt, run["metrics_last"], final=True)
            extra = {} if latest is None else {"metrics_last": latest}
        steps = decision.steps
        for i, step in enumerate(steps):
            if extra and step.to != S.RUNNING:
                step = dataclasses.replace(step, fields={**step.fields, **extra})
                extra = {}
            last = i == len(steps) - 1
            self._move(run, step, then=self._finished if last and decision.finished else None)

    def _facts(self, run: Row) -> AttemptFacts:
        stop = None
        if run["stop_requested_at"] is not None:
            reason = parse_stop_reason(run["stop_reason"]) or StopReason.PREEMPT
            stop = StopRequest(
                reason, run["stop_requested_at"], run["stop_message"] or "", run["stop_fault_at"]
            )
        attempt = run["attempt_count"] - 1
        return AttemptFacts(
            run_id=run["id"],
            state=RunState(run["state"]),
            attempt=attempt,
            run_started=run["started_at"] is not None,
            restarts=run["restarts"],
            cancel_requested=run["cancel_requested_at"] is not None,
            stop=stop,
            policy=self._restart_policy(run["id"]),
            lost_noted=AttemptKey(run["id"], attempt) in self._lost_noted,
        )

    def _restart_policy(self, run_id: str) -> RestartPolicy:
        policy = self._restart_policies.get(run_id)
        if policy is None:  # launched by an earlier server
            full = self.store.get(run_id)
            policy = restart_policy_of(full["spec_resolved"] if full else {})
            self._restart_policies[run_id] = policy
        return policy

    def _finished(self, run: Row) -> None:
        self._restart_policies.pop(run["id"], None)
        self.progress.pop(run["id"], None)
        self.housekeeping.run_finished(run["id"])

    # -- admission ----------------------------------------------------------------------
    def _admit(self) -> None:
        queued = self.store.in_states([S.QUEUED], scheduling=True)
        ahead = self.executor.submits_before_admission
        if not queued and not ahead and not self.admission.has_news():
            self.pending = {}
            return
        active = self.store.in_states([S.ADMITTED, S.RUNNING], light=True)
        if ahead:
            self._submit_ahead(queued, active)
        cycle = self.admission.cycle(queued, active)
        for stop in cycle.stops:
            self.store.request_stop(
                stop.run_id,
                StopRequest(stop.reason, self.clock(), stop.message, preemptor=stop.preemptor),
            )
        if cycle.stops:
            self.wake()  # signal the victims on the next pass
        for adm in cycle.admissions:
            run, attempt = adm.run, adm.run["attempt_count"]
            step = on_admitted(
                run["cluster_queue"] or "default",
                adm.flavor,
                adm.placement.as_record(),
                self.executor.location(AttemptKey(run["id"], attempt)),
                adm.how,
            )
            self._move(run, step, then=functools.partial(self._start, attempt=attempt))
        self.pending = cycle.pending

    def _submit_failures(self, failed: dict[AttemptKey, str], active: set[str]) -> None:
        """Failed launches of queued runs' next attempts (``_submit_ahead``)."""
        for key, why in failed.items():
            if key.run_id in active:
                continue  # applied by _reconcile
            run = self.store.get(key.run_id)
            if run is not None and run["state"] == S.QUEUED and run["attempt_count"] == key.attempt:
                self._apply(run, on_submit_failed(why, self.clock()))

    def _submit_ahead(self, queued: list[Row], active: list[Row]) -> None:
        """A cluster's admitter (Kueue) admits objects it sees: each queued run's next
        attempt is launched before its admission, and the executor removes the objects
        of every attempt no longer wanted (cancelled while queued, ended)."""
        wanted = {AttemptKey(r["id"], r["attempt_count"] - 1) for r in active}
        for run in queued:
            key = AttemptKey(run["id"], run["attempt_count"])
            wanted.add(key)
            if run["cancel_requested_at"] is not None or self.starter.in_flight(key):
                continue
            if not self.executor.is_launched(key):
                full = self.store.get(run["id"])
                if full is not None and full["state"] == S.QUEUED:
                    self._isolated(functools.partial(self._start, attempt=key.attempt), full)
        self.executor.retain(wanted)

    def _start(self, run: Row, attempt: int) -> None:
        self._restart_policies[run["id"]] = restart_policy_of(run["spec_resolved"])
        self.starter.start(run, attempt)

    # -- writing ------------------------------------------------------------------------
    def _move(
        self,
        run: Row,
        step: Step,
        *,
        then: Callable[[Row], None] | None = None,
    ) -> None:
        """Queue a transition for the phase's commit; ``then`` gets the run as recorded
        once it is durable (never when the move lost a race: see ``_commit``)."""
        move = Move(
            run["id"],
            Transition(step.to, step.reason, step.message),
            dict(step.fields),
            dict(step.new_attempt) if step.new_attempt is not None else None,
            dict(step.attempt_update) if step.attempt_update is not None else None,
        )
        self._queued.append(_Queued(move, then))

    def _commit(self) -> None:
        """Commit the queued transitions in one transaction, then act on each that was
        written. What that does may queue more (a launch that fails, a requeue after a
        preemption): they are committed in the next round."""
        while self._queued:
            batch, self._queued = self._queued, []
            results = self._write(batch)
            self.changes.notify(
                q.move.run_id
                for q, r in zip(batch, results, strict=True)
                if not isinstance(r, BaseException)
            )
            if self._move_observers:
                written = [
                    (q.move, r)
                    for q, r in zip(batch, results, strict=True)
                    if not isinstance(r, BaseException)
                ]
                for observer in self._move_observers:
                    try:
                        observer(written)
                    except Exception:  # an observer must never hold back the launches below
                        log.exception("a transition observer failed")
            for queued, result in zip(batch, results, strict=True):
                move = queued.move
                if isinstance(result, BaseException):
                    log.info("run %s not moved to %s: %s", move.run_id, move.step.to, result)
                    continue
                self._moved += 1
                if move.step.to != S.RUNNING:  # anything else may free or take quota
                    self._dirty = True
                if queued.then is not None:
                    self._isolated(queued.then, result)

    def _write(self, batch: list[_Queued]) -> list[Row | BaseException]:
        moves = [q.move for q in batch]
        try:
            return list(self.store.transition_many(moves))
        except Exception as exc:
            if is_disk_full(exc):
                raise
            log.exception("committing %d transitions failed", len(moves))
            if len(moves) == 1:
                return [exc]
        # One bad move must not hold back everyone else's: write them one by one.
        results: list[Row | BaseException] = []
        for move in moves:
            try:
                results.extend(self.store.transition_many([move]))
            except Exception as exc:
                if is_disk_full(exc):
                    raise
                results.append(exc)
        return results
