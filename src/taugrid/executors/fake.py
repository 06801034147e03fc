"""An executor that runs nothing: attempts live in memory and the test says what happens
to them (as httpx ships a mock transport). It keeps the executor port's contract
(``taugrid.ports.executor``): launch is idempotent per key, observe never raises, stop is
idempotent and its reason comes back with the exit.

    ex = FakeExecutor()
    engine = RunEngine(store, ex, admission, ...)
    engine.step()                 # the run is admitted and launched
    ex.start(key)                 # its process starts
    ex.exit(key, exit_code=1)     # and fails
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from taugrid.domain.lifecycle import Observation, Phase
from taugrid.domain.outcomes import AttemptExit
from taugrid.domain.stops import StopReason
from taugrid.ports.executor import AdmittedHere, AttemptKey, Capabilities, LaunchRequest
from taugrid.spec.modes import LOCAL


@dataclass
class FakeAttempt:
    request: LaunchRequest
    phase: Phase = Phase.STARTING
    started_at: float | None = None
    finished_at: float | None = None
    exit: AttemptExit | None = None
    detail: str | None = None
    stops: list[StopReason] = field(default_factory=list)  # every stop it was sent


class FakeExecutor(AdmittedHere):
    """``stop_ends_at_once``: a stop ends the attempt as ``cancelled`` with its reason
    (a workload that obeys SIGTERM); otherwise the test ends it with ``exit``."""

    def __init__(
        self,
        capabilities: Capabilities = LOCAL,
        *,
        stop_ends_at_once: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._capabilities = capabilities
        self.stop_ends_at_once = stop_ends_at_once
        self.attempts: dict[AttemptKey, FakeAttempt] = {}
        self.launches: list[LaunchRequest] = []  # in the order they were made
        self.refuse: dict[str, str] = {}  # run id -> why its launches fail
        self._lock = threading.Lock()
        self.clock = clock
        # Called with the attempt's location whenever it changes, as the local
        # supervisor's status push is (engine.attempt_reported).
        self.notify: Callable[[str], None] | None = None

    # -- the port -----------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def launch(self, req: LaunchRequest) -> None:
        with self._lock:
            if req.key in self.attempts:
                return
            if req.run_id in self.refuse:
                raise RuntimeError(self.refuse[req.run_id])
            self.attempts[req.key] = FakeAttempt(req)
            self.launches.append(req)

    def is_launched(self, key: AttemptKey) -> bool:
        with self._lock:
            return key in self.attempts

    def observe_many(self, keys: list[AttemptKey]) -> dict[AttemptKey, Observation]:
        with self._lock:
            return {key: self._observe(key) for key in keys}

    def stop(self, key: AttemptKey, reason: StopReason) -> bool:
        with self._lock:
            att = self.attempts.get(key)
            if att is None or att.phase == Phase.EXITED:
                return False
            att.stops.append(reason)
            if not self.stop_ends_at_once:
                return True
            self._end(att, AttemptExit("cancelled", None, stop_reason=reason))
        self._pushed(key)
        return True

    def location(self, key: AttemptKey) -> str:
        return f"fake://{key.run_id}/{key.attempt}"

    def attempt_of(self, report: str) -> AttemptKey | None:
        run_id, _, attempt = report.removeprefix("fake://").partition("/")
        return AttemptKey(run_id, int(attempt)) if attempt.isdigit() else None

    # -- what the test makes happen ------------------------------------------------------
    def start(self, key: AttemptKey) -> None:
        with self._lock:
            att = self.attempts[key]
            att.phase, att.started_at = Phase.RUNNING, self._tick()
        self._pushed(key)

    def exit(
        self,
        key: AttemptKey,
        exit_code: int | None = 0,
        *,
        outcome: str | None = None,
        signal: int | None = None,
    ) -> None:
        """The workload ends by itself (``outcome`` from the exit code unless given)."""
        with self._lock:
            att = self.attempts[key]
            if att.started_at is None:
                att.started_at = self._tick()
            how = outcome or ("succeeded" if exit_code == 0 and signal is None else "failed")
            self._end(att, AttemptExit(how, exit_code, signal))
        self._pushed(key)

    def lose(self, key: AttemptKey, why: str = "the node went away") -> None:
        with self._lock:
            self._end(self.attempts[key], AttemptExit("lost", None, error=why))
        self._pushed(key)

    def stopping(self, key: AttemptKey, detail: str) -> None:
        """Leftovers of the attempt are being stopped; it still holds its resources."""
        with self._lock:
            att = self.attempts[key]
            att.phase, att.detail = Phase.STOPPING, detail
        self._pushed(key)

    def finish_stops(self) -> None:
        """Attempts that were sent a stop end now, as they were told."""
        with self._lock:
            ended = [k for k, a in self.attempts.items() if a.stops and a.phase != Phase.EXITED]
            for key in ended:
                att = self.attempts[key]
                self._end(att, AttemptExit("cancelled", None, stop_reason=att.stops[-1]))
        for key in ended:
            self._pushed(key)

    # -- inside ---------------------------------------------------------------------------
    def _observe(self, key: AttemptKey) -> Observation:
        att = self.attempts.get(key)
        if att is None:
            return Observation(
                Phase.EXITED, exit=AttemptExit("lost", None, error="never launched here")
            )
        return Observation(att.phase, att.started_at, att.finished_at, att.exit, detail=att.detail)

    def _pushed(self, key: AttemptKey) -> None:
        if self.notify is not None:
            self.notify(self.location(key))

    def _end(self, att: FakeAttempt, ex: AttemptExit) -> None:
        att.phase, att.exit, att.finished_at = Phase.EXITED, ex, self._tick()

    def _tick(self) -> float:
        return self.clock()
