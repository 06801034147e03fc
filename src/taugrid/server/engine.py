"""The control loop: observe executors → decide (pure functions in domain) → act.

One thread owns every transition after submission, so the order of events for a run is
the order things happened. API handlers only record requests (submit, cancel) and wake
the loop. On start the first pass re-adopts live supervisors and finalises runs whose
process ended while the server was down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taugrid.domain.admission import Capacity, PendingRun, decide_admissions
from taugrid.domain.outcomes import classify_exit
from taugrid.domain.states import Reason, RunState
from taugrid.domain.workload_env import WorkloadContext, workload_env
from taugrid.errors import Conflict
from taugrid.executors.base import LaunchRequest, Observation
from taugrid.executors.local.executor import LocalExecutor
from taugrid.spec import expand_at_launch, parse_duration
from taugrid.store.runs import Row, RunStore, Transition

log = logging.getLogger("taugrid.engine")
S = RunState


class RunEngine:
    def __init__(
        self,
        store: RunStore,
        executor: LocalExecutor,
        *,
        gpus: int,
        snapshots_dir: Path,
        poll_interval_s: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.executor = executor
        self.capacity = Capacity(gpu_indices=tuple(range(gpus)))
        self.snapshots_dir = snapshots_dir
        self.poll_interval_s = poll_interval_s
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._cancels_sent: set[tuple[str, int]] = set()
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

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.step()
            except Exception:  # the loop must outlive any one bad run or DB hiccup
                log.exception("engine pass failed")
            self._wake.wait(self.poll_interval_s)

    # -- one pass -----------------------------------------------------------------------
    def step(self) -> None:
        for run in self.store.in_states([S.ADMITTED, S.RUNNING]):
            self._reconcile_active(run)
        self._admit()

    def _reconcile_active(self, run: Row) -> None:
        rid, attempt = run["id"], run["attempt_count"] - 1
        if not self.executor.is_launched(rid, attempt):
            self._launch(run, attempt)  # admitted, then the server died before launching
            return
        if run["cancel_requested_at"] is not None and (rid, attempt) not in self._cancels_sent:
            self.executor.cancel(rid, attempt)
            self._cancels_sent.add((rid, attempt))
        obs = self.executor.observe(rid, attempt)
        if obs.phase == "starting":
            return
        if run["state"] == S.ADMITTED and obs.started_at is not None:
            self._move(
                run,
                Transition(S.RUNNING, Reason.STARTED, "process started"),
                fields={"started_at": obs.started_at},
                attempt_update={"started_at": obs.started_at},
            )
        if obs.phase == "exited":
            self._finish(run, obs)

    def _finish(self, run: Row, obs: Observation) -> None:
        assert obs.exit is not None
        verdict = classify_exit(obs.exit)
        now = obs.finished_at or self.clock()
        self._move(
            run,
            Transition(verdict.state, verdict.reason, verdict.message),
            fields={"finished_at": now, "exit_code": obs.exit.exit_code},
            attempt_update={
                "finished_at": now,
                "exit_code": obs.exit.exit_code,
                "signal": obs.exit.signal,
                "outcome": obs.exit.outcome,
            },
        )
        self._cancels_sent.discard((run["id"], run["attempt_count"] - 1))

    def _admit(self) -> None:
        pending = [PendingRun(rid, gpus, seq) for rid, gpus, seq in self.store.queued()]
        if not pending:
            return
        cap = Capacity(self.capacity.gpu_indices, frozenset(self.store.gpus_in_use()))
        for adm in decide_admissions(pending, cap):
            run = self.store.get(adm.run_id)
            if run is None:
                continue
            attempt = run["attempt_count"]
            gpus = ",".join(map(str, adm.gpu_indices)) or "none"
            moved = self._move(
                run,
                Transition(S.ADMITTED, Reason.ADMITTED, f"admitted on local (GPUs: {gpus})"),
                new_attempt={
                    "placement": {"host": "local", "gpus": list(adm.gpu_indices)},
                    "attempt_dir": str(self.executor.attempt_dir(run["id"], attempt)),
                },
            )
            if moved is not None:
                self._launch(moved, attempt)

    def _launch(self, run: Row, attempt: int) -> None:
        try:
            self.executor.launch(self._launch_request(run, attempt))
        except Exception as exc:  # a run that cannot start must fail visibly, not hang
            log.exception("launch of %s failed", run["id"])
            self._move(
                run,
                Transition(S.FAILED, Reason.START_FAILED, f"could not start: {exc}"),
                fields={"finished_at": self.clock()},
                attempt_update={"finished_at": self.clock(), "outcome": "failed"},
            )

    def _launch_request(self, run: Row, attempt: int) -> LaunchRequest:
        spec: dict[str, Any] = run["spec_resolved"]
        att = self.store.attempt(run["id"], attempt)
        gpus = att["placement"].get("gpus", []) if att else []
        ctx = WorkloadContext(
            run_id=run["id"],
            run_name=run["name"],
            workspace=run["workspace"],
            attempt=attempt,
            checkpoint_dir=str(self.executor.checkpoint_dir(run["id"])),
            output_dir=str(self.executor.output_dir(run["id"])),
            metrics_file=str(self.executor.metrics_file(run["id"], attempt)),
            gpu_indices=gpus,
        )
        # `${VAR}` left in env values refers to the submitter's environment or TAU_*.
        base = workload_env(run["env_summary"], {}, ctx)
        spec_env: dict[str, str] = spec.get("env") or {}
        expanded = expand_at_launch(list(spec_env.values()), base)
        env = workload_env(run["env_summary"], dict(zip(spec_env, expanded, strict=True)), ctx)
        command = spec["command"]
        if isinstance(command, list):
            command = expand_at_launch(command, env)
        timeout = spec.get("timeout")
        return LaunchRequest(
            run_id=run["id"],
            attempt=attempt,
            snapshot=self.snapshots_dir / f"{run['snapshot_digest']}.tar.gz",
            command=command,
            setup=spec.get("setup"),
            env=env,
            stop_grace_s=parse_duration(spec.get("stop_grace") or "60s"),
            timeout_s=parse_duration(timeout) if timeout else None,
            outputs=list(spec.get("outputs") or []),
        )

    def _move(self, run: Row, step: Transition, **kw: Any) -> Row | None:
        try:
            return self.store.transition(run["id"], step, **kw)
        except Conflict:
            log.info("run %s moved concurrently; skipping %s", run["id"], step.to)
            return None
