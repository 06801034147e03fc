"""The control loop: observe executors → decide (pure functions in domain) → act.

One thread owns every transition after submission, so the order of events for a run is
the order things happened. API handlers only record requests (submit, cancel) and wake
the loop. On start the first pass re-adopts live supervisors and finalises runs whose
process ended while the server was down.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from taugrid.domain.outcomes import AttemptExit, Verdict, classify_exit
from taugrid.domain.restarts import (
    FailureClass,
    RestartPolicy,
    decide_restart,
    failure_class,
    requeue_after_preemption,
)
from taugrid.domain.scheduling import Overlaid, Pending
from taugrid.domain.scheduling_state import Scheduler
from taugrid.domain.states import Reason, RunState
from taugrid.executors.base import Observation
from taugrid.executors.local.executor import LocalExecutor
from taugrid.executors.local.secrets import LocalSecretStore
from taugrid.server.diskspace import DiskSpace, full_message, is_disk_full, run_disk_limit
from taugrid.server.housekeeping import Housekeeping
from taugrid.server.launching import AttemptLauncher, restart_policy_of
from taugrid.server.queueing import Queueing
from taugrid.server.run_files import MetricsTracker, RunFiles
from taugrid.store.runs import Move, Row, RunStore, Transition

log = logging.getLogger("taugrid.engine")
MIN_PASS_INTERVAL_S = 0.01
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
        executor: LocalExecutor,
        queueing: Queueing,
        *,
        snapshots_dir: Path,
        poll_interval_s: float = 0.5,
        retention_s: float | None = None,
        secrets_dir: Path | None = None,
        disk: DiskSpace | None = None,
        run_disk_limit_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.executor = executor
        self.queueing = queueing
        self.files = RunFiles(executor)
        self.metrics = MetricsTracker(executor)
        self.launcher = AttemptLauncher(
            store, executor, self.files, snapshots_dir, LocalSecretStore(secrets_dir)
        )
        self.housekeeping = Housekeeping(store, executor, retention_s, clock)
        # The last scheduling pass's explanation for every queued run (position, reason);
        # derived state, recomputed on each pass, so it needs no storage. Each is written
        # when first read (the scheduler's Explanations); the pass replaces the mapping.
        self.pending: Mapping[str, Pending] = {}
        self._scheduler = Scheduler()  # kept between passes: a pass costs what changed
        self._preempt_messages: dict[str, str] = {}
        self._preemptors: dict[str, str] = {}  # victim -> the run it makes room for
        self._dirty = True
        self._scheduled_at = 0.0
        # Reconciling every active run costs a few file reads and /proc looks each; a pass
        # woken by supervisors' pushes reconciles only the runs that pushed, and every
        # active run is looked at on any other wake-up and at least every poll interval.
        self._full_wanted = True
        self._reconciled_all_at = 0.0
        self._reported: set[str] = set()
        self._reported_lock = threading.Lock()
        self.snapshots_dir = snapshots_dir
        self.poll_interval_s = poll_interval_s
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._cancels_sent: set[tuple[str, int]] = set()
        self._lost_noted: set[tuple[str, int]] = set()  # SupervisorLost events written
        self._failing: set[str] = set()  # runs whose step raised (logged once each)
        # This pass's transitions, committed together (RunStore.transition_many).
        self._queued: list[_Queued] = []
        self._moved = 0  # transitions this pass wrote (a pass that wrote none rests longer)
        # Each launched run's restart policy (from its spec), so that finishing an
        # attempt needs no read of the full row; filled again from the row after a restart.
        self._restart_policies: dict[str, RestartPolicy] = {}
        self.disk = disk
        self.run_disk_limit_bytes = run_disk_limit_bytes  # when resources.disk is not set
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tau-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=10)

    def wake(self, *, reschedule: bool = True) -> None:
        """Run a pass soon. ``reschedule=False`` only needs the executor reconciled; a
        transition found there reschedules by itself."""
        if reschedule:
            self._dirty = True
        self._full_wanted = True
        self._wake.set()

    def attempt_reported(self, attempt_dir: str) -> None:
        """A supervisor pushed a status change: reconcile its run in a pass soon (only
        it, when nothing else asks for more). The push says which attempt; what it
        reports is read from the attempt's files, the truth, not from the push."""
        found = self.executor.attempt_of(attempt_dir)
        if found is None:
            self.wake(reschedule=False)
            return
        with self._reported_lock:
            self._reported.add(found[0])
        self._wake.set()

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
            gap = max(MIN_PASS_INTERVAL_S - (now - started), rest)
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
            idle = self._moved == 0
            self._wake.wait(self.poll_interval_s)

    # -- one pass -----------------------------------------------------------------------
    def step(self) -> None:
        """One pass: reconcile what the executor observes, requeue restarts, schedule.

        Each phase's transitions are committed together in one transaction (one fsync
        for a burst of runs starting or ending instead of one each) before anything acts
        on them: a run is launched only once its admission is durable."""
        self._queued.clear()  # left over only by a pass that failed: nothing was written
        if self.disk is not None:
            self.disk.maintain()
        with self._reported_lock:
            reported, self._reported = self._reported, set()
        now = time.monotonic()
        if self._full_wanted or now - self._reconciled_all_at >= self.poll_interval_s:
            self._full_wanted = False
            self._reconciled_all_at = now
            active = self.store.in_states([S.ADMITTED, S.RUNNING], light=True)
        elif reported:
            active = self.store.in_states([S.ADMITTED, S.RUNNING], light=True, ids=reported)
        else:
            active = []
        for run in active:
            self._isolated(self._reconcile_active, run)
        self._commit()
        # After that commit: an attempt that just failed may restart at once (backoff 0).
        for run in self.store.in_states([S.RESTARTING], light=True):
            self._isolated(self._requeue_restarting, run)
        self._commit()
        # Scheduling is the costly part of a pass; it is needed only when a run arrived,
        # left or changed queue, or the policy changed (and now and then, as a safety net).
        if self._dirty or time.monotonic() - self._scheduled_at > RESCHEDULE_EVERY_S:
            self._dirty = False
            self._scheduled_at = time.monotonic()
            self._schedule()
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

    def _reconcile_active(self, run: Row) -> None:
        rid, attempt = run["id"], run["attempt_count"] - 1
        if not self.executor.is_launched(rid, attempt):
            full = self.store.get(rid)  # admitted, then the server died before launching
            if full is not None:
                self._launch(full, attempt)
            return
        stop_asked = run["cancel_requested_at"] or run["preempt_requested_at"]
        if stop_asked is not None and (rid, attempt) not in self._cancels_sent:
            self.executor.cancel(rid, attempt)
            self._cancels_sent.add((rid, attempt))
        obs = self.executor.observe(rid, attempt)
        if obs.phase == "starting":
            return
        if run["state"] == S.ADMITTED and obs.started_at is not None:
            self._move(
                run,
                Transition(S.RUNNING, Reason.STARTED, "process started"),
                # The run started with its first attempt; each attempt keeps its own.
                fields={} if run["started_at"] is not None else {"started_at": obs.started_at},
                attempt_update={"started_at": obs.started_at},
            )
        if obs.phase == "stopping":  # still holds its GPUs until its processes are gone
            if (rid, attempt) not in self._lost_noted:
                self._lost_noted.add((rid, attempt))
                self.store.note(rid, Reason.SUPERVISOR_LOST, obs.detail or "supervisor lost")
            return
        self._lost_noted.discard((rid, attempt))
        if obs.phase == "exited":
            self._finish(run, obs)
        else:
            self._track_metrics(run, attempt)

    def _track_metrics(self, run: Row, attempt: int) -> None:
        latest = self.metrics.poll(run["id"], attempt, run["metrics_last"])
        if latest is not None:
            self.store.update_fields(run["id"], metrics_last=latest)

    def _restart_policy(self, run_id: str) -> RestartPolicy:
        policy = self._restart_policies.get(run_id)
        if policy is None:  # launched by an earlier server
            full = self.store.get(run_id)
            policy = restart_policy_of(full["spec_resolved"] if full else {})
        return policy

    def _finish(self, run: Row, obs: Observation) -> None:
        """An attempt ended: classify how, then finish the run or restart it."""
        ex = obs.exit
        assert ex is not None
        now = obs.finished_at or self.clock()
        attempt = run["attempt_count"] - 1
        self._cancels_sent.discard((run["id"], attempt))
        # The last metrics ride with the transition, in its commit (not one of their own).
        latest = self.metrics.poll(run["id"], attempt, run["metrics_last"], final=True)
        metrics = {} if latest is None else {"metrics_last": latest}
        policy = self._restart_policy(run["id"])
        preempted = (
            run["preempt_requested_at"] is not None
            and run["cancel_requested_at"] is None
            and ex.outcome == "cancelled"
        )
        if preempted:
            msg = self._preempt_messages.pop(
                run["id"], "preempted to make room for a higher-priority run"
            )
            verdict = Verdict(S.PREEMPTED, Reason.PREEMPTED, msg)
            update = _attempt_update(ex, now, verdict, FailureClass.PREEMPTED, "preempted")
            if requeue_after_preemption(policy):
                self._requeue_preempted(run, update, metrics)
                return
            self._preemptors.pop(run["id"], None)
            verdict = Verdict(S.FAILED, Reason.PREEMPTED, f"{msg}; restart.on has no preemption")
        else:
            verdict = classify_exit(ex)
            cls = failure_class(ex, verdict)
            update = _attempt_update(ex, now, verdict, cls, ex.outcome)
            if cls is not None and run["cancel_requested_at"] is None:
                decision = decide_restart(policy, run["restarts"], cls)
                if decision.restart:
                    self._move(
                        run,
                        Transition(
                            S.RESTARTING, verdict.reason, f"{verdict.message}; {decision.why}"
                        ),
                        fields={
                            "restarts": run["restarts"] + 1,
                            "next_attempt_at": now + decision.delay_s,
                            "exit_code": ex.exit_code,
                            **metrics,
                        },
                        attempt_update=update,
                    )
                    return
                if policy.max > 0:
                    verdict = Verdict(
                        verdict.state, verdict.reason, f"{verdict.message}; {decision.why}"
                    )
        self._move(
            run,
            Transition(verdict.state, verdict.reason, verdict.message),
            fields={"finished_at": now, "exit_code": ex.exit_code, **metrics},
            attempt_update=update,
            then=self._finished if verdict.state.terminal else None,
        )

    def _finished(self, run: Row) -> None:
        self._restart_policies.pop(run["id"], None)
        self.housekeeping.run_finished(run["id"])

    def _requeue_restarting(self, run: Row) -> None:
        """Back to the queue once the backoff has passed; keeps its place (submit order)."""
        if (run["next_attempt_at"] or 0.0) > self.clock():
            return
        self._move(
            run,
            Transition(
                S.QUEUED, Reason.RESTARTING, f"restarting as attempt {run['attempt_count']}"
            ),
            fields={"next_attempt_at": None},
        )

    def _requeue_preempted(
        self, run: Row, attempt_update: dict[str, Any], metrics: dict[str, Any]
    ) -> None:
        """PREEMPTED, then back in its queue; it restarts as a new attempt when admitted."""
        self._preemptors.pop(run["id"], None)
        self._move(
            run,
            Transition(S.PREEMPTED, Reason.PREEMPTED, attempt_update["message"]),
            fields={"preempt_requested_at": None, "flavor": None, **metrics},
            attempt_update=attempt_update,
            then=lambda moved: self._move(
                moved, Transition(S.QUEUED, Reason.QUEUED, "requeued after preemption")
            ),
        )

    def _schedule(self) -> None:
        queued = self.store.in_states([S.QUEUED], scheduling=True)
        if not queued:
            self.pending = {}
            return
        active = self.store.in_states([S.ADMITTED, S.RUNNING], light=True)
        known = self.queueing.policy.domain.queues
        schedulable = [r for r in queued if (r["cluster_queue"] or "default") in known]
        snap = self.queueing.snapshot(schedulable, active, self._preemptors)
        decisions = self._scheduler.decide(snap)
        pending: dict[str, Pending] = {}  # what the engine says over the scheduler's words
        for r in queued:
            if (r["cluster_queue"] or "default") not in known:  # its queue left the policy
                pending[r["id"]] = Pending(
                    r["id"],
                    r["cluster_queue"],
                    0,
                    "Misconfigured",
                    f"cluster queue '{r['cluster_queue']}' is not in the policy in force",
                )
        for p in decisions.preemptions:
            self._preempt_messages[p.victim_id] = p.message
            self._preemptors[p.victim_id] = p.preemptor_id
            self.store.update_fields(p.victim_id, preempt_requested_at=self.clock())
        if decisions.preemptions:
            self.wake()  # signal the victims on the next pass
        by_id = {r["id"]: r for r in queued} if decisions.admissions else {}
        in_use = self.store.gpus_in_use()
        short = self.disk.short_by() if self.disk is not None and decisions.admissions else None
        for adm in decisions.admissions:
            if short is not None:  # no new work onto a full disk; it waits in its place
                pending[adm.workload_id] = Pending(
                    adm.workload_id,
                    adm.cluster_queue,
                    1,
                    "DiskFull",
                    full_message("launch", *short),
                )
                continue
            run = by_id[adm.workload_id]
            need = int((run["requests"] or {}).get("gpu") or run["gpus"])
            gpus = self.queueing.pick_devices(adm.flavor, need, in_use)
            if gpus is None:  # quota admits it but no physical GPU is free (policy > machine)
                pending[run["id"]] = Pending(
                    run["id"],
                    adm.cluster_queue,
                    1,
                    "WaitingForDevices",
                    f"quota admits it, but no free GPU of flavor {adm.flavor} is on this "
                    "machine yet",
                )
                continue
            in_use.update(gpus)
            self._admit(run, adm.flavor, gpus)
        self.pending = Overlaid(pending, decisions.pending) if pending else decisions.pending

    def _admit(self, run: Row, flavor: str, gpus: tuple[int, ...]) -> None:
        attempt = run["attempt_count"]
        shown = ",".join(map(str, gpus)) or "none"
        self._move(
            run,
            Transition(
                S.ADMITTED,
                Reason.ADMITTED,
                f"admitted to {run['cluster_queue'] or 'default'} on flavor {flavor} "
                f"(GPUs: {shown})",
            ),
            fields={"flavor": flavor},
            new_attempt={
                "placement": {"host": "local", "flavor": flavor, "gpus": list(gpus)},
                "attempt_dir": str(self.executor.attempt_dir(run["id"], attempt)),
            },
            then=lambda moved: self._launch(moved, attempt),
        )

    def _launch(self, run: Row, attempt: int) -> None:
        self._restart_policies[run["id"]] = restart_policy_of(run["spec_resolved"])
        try:
            req = self.launcher.request(run, attempt)
            limit = run_disk_limit(run["spec_resolved"], self.run_disk_limit_bytes)
            self.executor.launch(dataclasses.replace(req, disk_limit_bytes=limit))
        except Exception as exc:  # a run that cannot start must fail visibly, not hang
            log.exception("launch of %s failed", run["id"])
            self._restart_policies.pop(run["id"], None)
            self._move(
                run,
                Transition(S.FAILED, Reason.START_FAILED, f"could not start: {exc}"),
                fields={"finished_at": self.clock()},
                attempt_update={
                    "finished_at": self.clock(),
                    "outcome": "failed",
                    "reason": Reason.START_FAILED.value,
                    "failure_class": FailureClass.START_FAILED.value,
                    "message": f"could not start: {exc}",
                },
            )

    def _move(
        self,
        run: Row,
        step: Transition,
        *,
        fields: dict[str, Any] | None = None,
        new_attempt: dict[str, Any] | None = None,
        attempt_update: dict[str, Any] | None = None,
        then: Callable[[Row], None] | None = None,
    ) -> None:
        """Queue a transition for the phase's commit; ``then`` gets the run as recorded
        once it is durable (never when the move lost a race: see ``_commit``)."""
        move = Move(run["id"], step, fields, new_attempt, attempt_update)
        self._queued.append(_Queued(move, then))

    def _commit(self) -> None:
        """Commit the queued transitions in one transaction, then act on each that was
        written. What that does may queue more (a launch that fails, a requeue after a
        preemption): they are committed in the next round."""
        while self._queued:
            batch, self._queued = self._queued, []
            for queued, result in zip(batch, self._write(batch), strict=True):
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


def _attempt_update(
    ex: AttemptExit, now: float, verdict: Verdict, cls: FailureClass | None, outcome: str | None
) -> dict[str, Any]:
    return {
        "finished_at": now,
        "exit_code": ex.exit_code,
        "signal": ex.signal,
        "outcome": outcome,
        "reason": verdict.reason.value,
        "failure_class": cls.value if cls else None,
        "message": verdict.message,
    }
