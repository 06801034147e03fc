"""GPU use of the running runs: sampled every ``interval_s`` through the ``GpuUsage`` port,
kept per run for ``tau status RUN``, ``tau metrics RUN`` and the metrics, and judged by
the policy's idle rule (``domain/gpu_use.py``): a run whose GPUs sit idle is flagged once
per idle stretch (a ``GpuIdle`` event) and, when the policy says ``stop``, stopped.

The samples live in memory (the last ``KEEP``, about an hour at 15 s): they say how the
GPUs are used now, not a history to keep; a restarted server starts its windows again,
which can only delay a flag, never raise a false one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from taugrid.domain.gpu_use import (
    GpuReading,
    IdleRule,
    UseSample,
    holders_to_runs,
    idle_verdict,
    idle_words,
    sample_of,
)
from taugrid.domain.states import Reason
from taugrid.domain.stops import StopReason
from taugrid.manifests.workloads import job_name
from taugrid.ports.devices import GpuUsage, RunPlace

log = logging.getLogger("taugrid.server")
INTERVAL_S = 15.0
KEEP = 240


class Stopper(Protocol):
    def request_stop(self, run_id: str, reason: StopReason, message: str) -> bool: ...


class Notes(Protocol):
    def note(self, run_id: str, reason: Reason, message: str) -> None: ...


@dataclass
class _RunUse:
    place: RunPlace
    samples: deque[UseSample] = field(default_factory=lambda: deque(maxlen=KEEP))
    idle_since: float | None = None
    flagged: bool = False  # flagged in the current idle stretch
    stopped: bool = False


class GpuUseTracker:
    def __init__(
        self,
        usage: GpuUsage,
        places: Callable[[], Mapping[str, RunPlace]],
        rule: Callable[[], IdleRule],
        notes: Notes,
        stopper: Stopper,
        *,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.usage = usage
        self.places = places  # the runs that hold GPUs now, and where
        self.rule = rule
        self.notes = notes
        self.stopper = stopper
        self.interval_s = interval_s
        self.clock = clock
        self._runs: dict[str, _RunUse] = {}
        self._latest: dict[int, GpuReading] = {}  # per GPU, for the metrics
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tau-gpu-use", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.usage.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # a bad round must not end the sampling
                log.exception("sampling GPU use failed")

    # -- one round ------------------------------------------------------------------------
    def sample(self) -> None:
        """Read the GPUs of every run that holds some, then judge each run."""
        now = self.clock()
        runs = dict(self.places())
        readings = self.usage.read(runs) if runs else {}
        rule = self.rule()
        to_flag: list[tuple[str, str, bool]] = []
        with self._lock:
            # Per GPU index for the metrics: local mode only (a cluster's indices repeat
            # on every node; there the DCGM exporter's own series are the per-GPU ones).
            self._latest = {
                g.index: g for run, got in readings.items() if runs[run].gpus for g in got
            }
            for gone in [r for r in self._runs if r not in runs]:
                del self._runs[gone]
            for run_id, place in runs.items():
                use = self._runs.get(run_id)
                if use is None or use.place != place:  # a new attempt: a new window
                    use = self._runs[run_id] = _RunUse(place)
                got = sample_of(now, readings.get(run_id, []))
                if got is not None:
                    use.samples.append(got)
                verdict = idle_verdict(
                    list(use.samples),
                    rule,
                    now,
                    max_gap_s=3 * self.interval_s,
                    flagged=use.flagged,
                )
                use.idle_since = verdict.idle_since
                use.flagged = use.flagged and verdict.idle_since is not None
                if verdict.flag or (verdict.stop and not use.stopped):
                    assert verdict.idle_since is not None
                    use.flagged = True
                    use.stopped = use.stopped or verdict.stop
                    words = idle_words(rule, verdict.idle_since, now)
                    to_flag.append((run_id, words, verdict.stop))
        for run_id, words, stop in to_flag:  # the store and the engine, outside the lock
            self.notes.note(run_id, Reason.GPU_IDLE, words)
            if stop:
                self.stopper.request_stop(run_id, StopReason.CANCEL, f"stopped: {words}")

    # -- what is shown --------------------------------------------------------------------
    def of(self, run_id: str) -> dict[str, Any] | None:
        """The run's latest GPU use, for the API (None: not sampled)."""
        with self._lock:
            use = self._runs.get(run_id)
            if use is None or not use.samples:
                return None
            last = use.samples[-1]
            return {
                "at": last.at,
                "utilization_pct": last.utilization_pct,
                "memory_used_bytes": last.memory_used_bytes,
                "memory_total_bytes": last.memory_total_bytes,
                "gpus": [
                    {
                        "index": g.index,
                        "utilization_pct": g.utilization_pct,
                        "memory_used_bytes": g.memory_used_bytes,
                        "memory_total_bytes": g.memory_total_bytes,
                    }
                    for g in last.gpus
                ],
                "idle_since": use.idle_since,
                "flagged_idle": use.flagged,
            }

    def series(self, run_id: str) -> list[dict[str, Any]]:
        """The run's kept samples, oldest first (``tau metrics``)."""
        with self._lock:
            use = self._runs.get(run_id)
            samples = list(use.samples) if use is not None else []
        return [
            {
                "time": s.at,
                "utilization_pct": s.utilization_pct,
                "memory_used_bytes": s.memory_used_bytes,
            }
            for s in samples
        ]

    def latest_by_gpu(self) -> dict[int, GpuReading]:
        with self._lock:
            return dict(self._latest)

    def flagged(self) -> set[str]:
        """The runs flagged idle now."""
        with self._lock:
            return {r for r, use in self._runs.items() if use.flagged}


def local_places(
    holders: Callable[[], Mapping[int, Sequence[str]]],
) -> Callable[[], dict[str, RunPlace]]:
    """Local mode: each run holding GPUs, by their indices on this machine."""

    def places() -> dict[str, RunPlace]:
        return {run: RunPlace(tuple(gpus)) for run, gpus in holders_to_runs(holders()).items()}

    return places


def cluster_places(
    running: Callable[[], Sequence[Mapping[str, Any]]],
    namespace_of: Callable[[str], str],
) -> Callable[[], dict[str, RunPlace]]:
    """A cluster: each running run that asked for GPUs, by its attempt's pods (named after
    the attempt's Job or RayJob, ``manifests.workloads.job_name``)."""

    def places() -> dict[str, RunPlace]:
        return {
            r["id"]: RunPlace(
                namespace=namespace_of(r["workspace"]),
                pod_prefix=job_name(r["id"], max(r["attempt_count"] - 1, 0)),
            )
            for r in running()
            if r["gpus"]
        }

    return places
