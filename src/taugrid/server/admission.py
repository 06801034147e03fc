"""Admission as a strategy chosen by the mode.

- ``InternalAdmission`` (local mode): TauGrid decides. The scheduler (pure, in
  ``domain.scheduling*``) admits and preempts under the policy's quotas, and specific GPUs
  are picked from the device inventory.
- ``ObservedAdmission`` (a cluster: Kueue decides): an external admitter reports
  admission, eviction and preemption (``ports.admission.AdmissionSource``); the engine
  only records what it is told.

Either returns the same ``AdmissionCycle``; the engine applies it (transitions in one
commit, then launches and stops), so nothing downstream knows which strategy ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from taugrid.domain.scheduling import Overlaid, Pending
from taugrid.domain.scheduling_state import Scheduler
from taugrid.domain.stops import StopReason
from taugrid.ports.admission import AdmissionEvent, AdmissionKind, AdmissionSource
from taugrid.ports.executor import Placement
from taugrid.server.diskspace import DiskSpace, full_message
from taugrid.server.queueing import Queueing

Row = dict[str, Any]
# An admitter's event for a run this server does not see queued (yet) is kept this long.
HELD_EVENT_S = 60.0


@dataclass(frozen=True)
class Admit:
    run: Row
    flavor: str
    placement: Placement
    how: str = ""  # said after the admission message: by whom, when not TauGrid


@dataclass(frozen=True)
class Stop:
    run_id: str
    reason: StopReason
    message: str
    preemptor: str | None = None


@dataclass
class AdmissionCycle:
    admissions: list[Admit] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    # Why each queued run still waits (position, reason); the queue view shows it.
    pending: Mapping[str, Pending] = field(default_factory=dict)


class AdmissionStrategy(Protocol):
    name: str  # "internal" | "observed"

    def cycle(self, queued: list[Row], active: list[Row]) -> AdmissionCycle:
        """One admission cycle over the runs queued and the runs holding resources."""
        ...

    def has_news(self) -> bool:
        """Whether something outside the store asks for a cycle now (an admitter's event)."""
        ...


class InternalAdmission:
    name = "internal"

    def __init__(
        self,
        queueing: Queueing,
        gpus_in_use: Callable[[], set[int]],
        disk: DiskSpace | None = None,
    ) -> None:
        self.queueing = queueing
        self.gpus_in_use = gpus_in_use  # GPUs held by runs' current attempts (the store)
        self.disk = disk
        self._scheduler = Scheduler()  # kept between cycles: a cycle costs what changed
        self._preemptors: dict[str, str] = {}  # victim -> the run it makes room for

    def has_news(self) -> bool:
        return False

    def cycle(self, queued: list[Row], active: list[Row]) -> AdmissionCycle:
        known = self.queueing.policy.domain.queues
        active_ids = {r["id"] for r in active}
        self._preemptors = {v: p for v, p in self._preemptors.items() if v in active_ids}
        schedulable = [r for r in queued if (r["cluster_queue"] or "default") in known]
        snap = self.queueing.snapshot(schedulable, active, self._preemptors)
        decisions = self._scheduler.decide(snap)
        out = AdmissionCycle()
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
            self._preemptors[p.victim_id] = p.preemptor_id
            out.stops.append(Stop(p.victim_id, StopReason.PREEMPT, p.message, p.preemptor_id))
        by_id = {r["id"]: r for r in queued} if decisions.admissions else {}
        in_use = self.gpus_in_use() if decisions.admissions else set()
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
            out.admissions.append(Admit(run, adm.flavor, Placement(adm.flavor, gpus)))
        out.pending = Overlaid(pending, decisions.pending) if pending else decisions.pending
        return out


class ObservedAdmission:
    """The engine records what an external admitter decided; it decides nothing."""

    name = "observed"

    def __init__(
        self,
        source: AdmissionSource,
        admitter: str = "the admitter",
        clock: Callable[[], float] = time.monotonic,
        explain: Callable[[str, int], tuple[int | None, str] | None] | None = None,
    ) -> None:
        self.source = source
        self.admitter = admitter
        self.clock = clock
        # Where a queued run's next attempt waits (the admitter's position, 1 first, when
        # it tells) and why, in its words (Kueue's Workload conditions); None: unknown.
        self.explain = explain or (lambda run_id, attempt: None)
        self._held: dict[str, tuple[float, AdmissionEvent]] = {}  # run id -> newest event

    def has_news(self) -> bool:
        for event in self.source.drain():
            self._held[event.run_id] = (self.clock(), event)
        return bool(self._held)

    def cycle(self, queued: list[Row], active: list[Row]) -> AdmissionCycle:
        self.has_news()
        queued_by_id = {r["id"]: r for r in queued}
        active_ids = {r["id"] for r in active}
        out = AdmissionCycle()
        now = self.clock()
        for run_id, (seen, event) in list(self._held.items()):
            if event.kind is AdmissionKind.ADMITTED and run_id in queued_by_id:
                assert event.placement is not None, "an admission names its placement"
                out.admissions.append(
                    Admit(
                        queued_by_id[run_id],
                        event.placement.flavor,
                        event.placement,
                        f" by {self.admitter}",
                    )
                )
            elif event.kind is not AdmissionKind.ADMITTED and run_id in active_ids:
                why = event.message or f"evicted by {self.admitter}"
                out.stops.append(Stop(run_id, StopReason.PREEMPT, why))
            elif event.kind is AdmissionKind.ADMITTED and now - seen < HELD_EVENT_S:
                continue  # the admitter was quicker than the store: applies once queued
            # An eviction of a run that holds nothing has nothing to stop: dropped at once,
            # so it cannot hit the run's next admission.
            del self._held[run_id]
        admitted = {a.run["id"] for a in out.admissions}
        waiting = [r for r in queued if r["id"] not in admitted]
        out.pending = {}
        for i, r in enumerate(waiting):
            told = self.explain(r["id"], r["attempt_count"])
            position, words = told if told is not None else (None, "")
            out.pending[r["id"]] = Pending(
                r["id"],
                r["cluster_queue"],
                position or i + 1,
                "WaitingForAdmission",
                words or f"waiting for {self.admitter} to admit it",
            )
        return out
