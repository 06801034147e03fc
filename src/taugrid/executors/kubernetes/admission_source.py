"""Kueue as the admitter (``ports.admission.AdmissionSource``): the edges of each Workload's
conditions (``status.admission_events``) as admission events, in the order the informer
saw them, and why each queued attempt still waits (``pending``).

Only the newest attempt TauGrid launched for a run speaks for it, and never one TauGrid
stopped: Kueue requeues an evicted Workload at once, and its re-admission must not admit
the run's next attempt before that attempt's own objects exist.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from taugrid.executors.kubernetes.client import JsonObject
from taugrid.executors.kubernetes.ledger import LaunchLedger
from taugrid.executors.kubernetes.positions import QueuePositions
from taugrid.executors.kubernetes.status import (
    WorkloadView,
    admission_events,
    pending_words,
    workload_view,
)
from taugrid.ports.admission import AdmissionEvent
from taugrid.ports.executor import AttemptKey


class KueueAdmissionSource:
    def __init__(self, ledger: LaunchLedger, wake: Callable[[], None] = lambda: None) -> None:
        self._ledger = ledger
        self.wake = wake  # the engine: a cycle soon
        self._lock = threading.Lock()
        self._events: list[AdmissionEvent] = []
        self._views: dict[AttemptKey, WorkloadView] = {}
        self.positions: QueuePositions | None = None  # Kueue's visibility API, when read

    def workload_changed(self, key: AttemptKey, after: JsonObject | None) -> None:
        """ClusterCache's ``on_workload``: runs on an informer thread. A Workload of an
        attempt not yet recorded as launched (Kueue was quicker than the ledger) is
        looked at again when it is (``attempt_recorded``)."""
        entry = self._ledger.get(key)
        with self._lock:
            if after is None:
                self._views.pop(key, None)
                return
            if entry is None:
                return
            old = self._views.get(key)
            events = self._edges(key, after, stopped=entry.stop is not None)
            new = self._views[key]
            # Why it waits changed: the queue's explanations are worth a cycle too.
            reworded = old is None or pending_words(old) != pending_words(new)
        if events or reworded:
            self.wake()

    def attempt_recorded(self, key: AttemptKey, workload: JsonObject | None) -> None:
        """The executor recorded the attempt's launch; ``workload``: its Workload now."""
        if workload is None:
            return
        with self._lock:
            events = self._edges(key, workload, stopped=False)
        if events:
            self.wake()

    def _edges(
        self, key: AttemptKey, workload: JsonObject, *, stopped: bool
    ) -> list[AdmissionEvent]:
        old = self._views.get(key)
        new = self._views[key] = workload_view(workload)
        if stopped or not self._newest(key):
            return []
        events = admission_events(key.run_id, old, new)
        self._events.extend(events)
        return events

    def _newest(self, key: AttemptKey) -> bool:
        newest = self._ledger.newest_attempt(key.run_id)
        return newest is None or newest <= key.attempt

    def drain(self) -> list[AdmissionEvent]:
        with self._lock:
            events, self._events = self._events, []
        return events

    def pending(self, run_id: str, attempt: int) -> tuple[int | None, str] | None:
        """Where the attempt waits in its ClusterQueue (Kueue's visibility API, 1 first)
        and why, in Kueue's words; None when Kueue has said nothing yet."""
        key = AttemptKey(run_id, attempt)
        with self._lock:
            view = self._views.get(key)
        spot = self.positions.get(key) if self.positions is not None else None
        if view is None and spot is None:
            return None
        words = (pending_words(view) if view is not None else None) or "waiting for Kueue"
        if spot is not None:
            words = f"{words} (#{spot.in_local_queue} in local queue {spot.local_queue})"
        return (spot.in_cluster_queue if spot is not None else None), words
