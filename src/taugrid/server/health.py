"""The GPU health monitor of a local server: from what the fault sources see to GPUs out
of service and the affected runs restarted elsewhere.

One thread reads every source under its watchdog (``taugrid.health.watchdog``), and for
each observation: the classifier decides (``domain.health``, pure), the effects on this
machine are planned (``domain.health.effects``, pure), and then they are applied once,
in order: the quarantine and the event are committed together (``store.health``), the
device inventory stops offering the GPU (the scheduler places nothing there from its
next pass), and each run holding it is stopped as a hardware fault with the fault's
time (``RunEngine.request_stop``): it gets SIGTERM and its ``stop_grace``, and restarts
on healthy GPUs from the newest verified checkpoint written before the fault, later ones
skipped with an event saying why. Every decision is an event row, acted on or not
(duplicate, shadow mode, the breaker open): the audit trail.

A restarted server puts back out of service every GPU that was out. Only a person
returns one (``return_gpu``), after which a new fault starts afresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from taugrid.domain.health import ClassifierState, HealthRules, Kind, Observation, classify
from taugrid.domain.health.classify import Decision, release
from taugrid.domain.health.effects import APPLIED, Breaker, Effects, LocalGpu, local_effects
from taugrid.domain.stops import StopReason
from taugrid.errors import NotFound, UsageError
from taugrid.ports.devices import DeviceInventory
from taugrid.ports.health import FaultSource
from taugrid.store.health import HealthStore

log = logging.getLogger("taugrid.health")
NODE = "local"
READ_TIMEOUT_S = 0.5  # each source's wait per round; the scripted one answers at once
DEADLINE_S = 45.0  # a read past this is a hang (the reference's 3x a 15 s poll)


class Stopper(Protocol):
    def request_stop(
        self, run_id: str, reason: StopReason, message: str, *, fault_at: float | None = None
    ) -> bool: ...


@dataclass(frozen=True)
class Handled:
    """One decision as it was recorded and acted on."""

    event_id: int
    decision: Decision
    effects: Effects
    stopped: tuple[str, ...]


class HealthMonitor:
    def __init__(
        self,
        store: HealthStore,
        devices: DeviceInventory,
        stopper: Stopper,
        holders: Callable[[], dict[int, list[str]]],
        sources: Sequence[FaultSource],
        *,
        rules: HealthRules | None = None,
        shadow: bool = False,
        breaker: Breaker | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.devices = devices
        self.stopper = stopper
        self.holders = holders
        self.sources = list(sources)
        self.rules = rules or HealthRules()
        self.shadow = shadow
        self.breaker = breaker or Breaker()
        self.clock = clock
        self._state = ClassifierState()
        self._lock = threading.Lock()  # one observation at a time: decide, then apply
        self._taken_out_at: list[float] = []
        # For the metrics (server/metrics.py): decisions by (level, outcome, the
        # observation's kind), and runs stopped.
        self.decisions: Counter[tuple[int, str, str]] = Counter()
        self.runs_stopped = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def restore(self) -> int:
        """Every GPU recorded out of service is out again (before the first pass)."""
        by_uuid = {g.uuid: g for g in self.devices.devices()}
        restored = 0
        for row in self.store.quarantined():
            gpu = by_uuid.get(row["gpu"])
            if gpu is not None:
                self.devices.quarantine(gpu.index, row["reason"])
                restored += 1
        return restored

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tau-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for source in self.sources:
            source.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for source in self.sources:
                try:
                    seen = source.read(READ_TIMEOUT_S)
                except Exception:  # a source's failure is logged, never the monitor's end
                    log.exception("GPU health: reading %s failed", source.name)
                    seen = []
                for obs in seen:
                    try:
                        self.handle(obs, via=source.name)
                    except Exception:
                        log.exception("GPU health: acting on %s failed", obs)
            if not self.sources:
                self._stop.wait(1.0)

    # -- one observation ------------------------------------------------------------------
    def handle(self, obs: Observation, *, via: str = "") -> list[Handled]:
        """Decide on ``obs`` (read from the source named ``via``) and act, in order."""
        with self._lock:
            self._state, decisions = classify(self._state, obs, self.rules)
            return [self._apply(obs, d, obs.source or via or "unknown") for d in decisions]

    def _apply(self, obs: Observation, d: Decision, source: str) -> Handled:
        gpus = [LocalGpu(g.index, g.uuid) for g in self.devices.devices()]
        out = frozenset(r["gpu"] for r in self.store.quarantined())
        effects = local_effects(
            d,
            gpus,
            self.holders(),
            out,
            taken_out_at=self._taken_out_at,
            shadow=self.shadow,
            breaker=self.breaker,
        )
        index = next((g.index for g in gpus if g.uuid == d.gpu_uuid), None)
        event = {
            "at": d.at,
            "node": d.node,
            "gpu": d.gpu_uuid or None,
            "gpu_index": index,
            "source": source,
            "kind": obs.kind.value,
            "xid": obs.xid,
            "level": int(d.level),
            "action": action_of(d),
            "outcome": effects.outcome,
            "reason": f"{d.reason}: {effects.words}",
        }
        self.decisions[(int(d.level), effects.outcome, obs.kind.value)] += 1
        if effects.outcome != APPLIED:
            if effects.outcome != "duplicate" and d.level >= 2:
                log.warning("GPU health: %s (%s)", event["reason"], effects.outcome)
            return Handled(self.store.record(event), d, effects, ())
        if effects.quarantine:
            event_id = self.store.take_out(
                [(g.uuid, g.index) for g in effects.quarantine],
                node=d.node,
                level=int(d.level),
                reason=d.reason,
                fault_at=d.at,
                event=event,
            )
            self._taken_out_at.append(d.at)
            for g in effects.quarantine:  # durable first: then nothing places work there
                self.devices.quarantine(g.index, d.reason)
        else:
            event_id = self.store.record(event)
        stopped = []
        for run_id in effects.stop_runs:
            where = f"GPU {index}" if index is not None else "this machine's GPUs"
            message = f"{d.reason} on {where}; it resumes on healthy GPUs"
            if self.stopper.request_stop(run_id, StopReason.HARDWARE, message, fault_at=d.at):
                stopped.append(run_id)
        if stopped:
            self.store.set_runs(event_id, stopped)
            self.runs_stopped += len(stopped)
        log.warning("GPU health: %s", event["reason"])
        return Handled(event_id, d, effects, tuple(stopped))

    # -- what people do ---------------------------------------------------------------------
    def inject(self, index: int, xid: int) -> list[Handled]:
        """A fault on GPU ``index`` as the scripted source delivers it (drills, demos)."""
        gpu = self._gpu(index)
        if xid < 0:
            raise UsageError(f"an Xid is a number >= 0, not {xid}")
        obs = Observation(Kind.XID, gpu.uuid, NODE, self.clock(), xid=xid, source="scripted")
        return self.handle(obs)

    def return_gpu(self, index: int, by: str) -> bool:
        """Back into service after a person's decision; False when it was not out."""
        gpu = self._gpu(index)
        event = returned_event(
            self.clock(), NODE, gpu.uuid, gpu.index, f"GPU {gpu.index} returned to service by {by}"
        )
        with self._lock:
            if not self.store.release(gpu.uuid, by, event):
                return False
            self._state = release(self._state, NODE, gpu.uuid)
            self.devices.release(gpu.index)
        return True

    def _gpu(self, index: int) -> Any:
        for g in self.devices.devices():
            if g.index == index:
                return g
        known = ", ".join(str(g.index) for g in self.devices.devices()) or "none"
        raise NotFound(f"no GPU {index} on this machine (GPUs: {known})")


def returned_event(
    at: float, node: str, gpu: str | None, index: int | None, reason: str
) -> dict[str, Any]:
    """The audit row of a person's return to service."""
    return {
        "at": at,
        "node": node,
        "gpu": gpu,
        "gpu_index": index,
        "source": "admin",
        "kind": "returned",
        "xid": None,
        "level": 0,
        "action": "return to service",
        "outcome": APPLIED,
        "reason": reason,
    }


def action_of(d: Decision) -> str:
    """What a decision's level calls for, in the events' words."""
    if d.level >= 5:
        return "fail closed"
    if d.level >= 2:
        return "take out of service"
    return "record"
