"""Every read of a fault source under a deadline: NVML calls can hang in the driver (a GPU
fallen off the bus can wedge them for minutes), and a monitor stuck in one sees nothing
else. A read runs on a worker thread of its own; past the deadline the monitor goes on
with an ``nvml_hang`` observation for the source's node (its GPUs are then unknown, not
healthy), and that source is not read again until the stuck call returns.

The clock is injected, so the deadline is testable without waiting for it in full.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from taugrid.domain.health import Kind, Observation
from taugrid.ports.health import FaultSource

log = logging.getLogger("taugrid.health")


class Watched:
    def __init__(
        self,
        source: FaultSource,
        *,
        node: str,
        deadline_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.name = source.name
        self.node = node
        self.deadline_s = deadline_s
        self._clock = clock
        self._busy: threading.Thread | None = None
        self._result: list[Observation] = []
        self._error: BaseException | None = None
        self.hung_since: float | None = None
        self._warned_unavailable = False

    @property
    def available(self) -> bool:
        return self.source.available

    @property
    def why(self) -> str:
        return self.source.why

    def close(self) -> None:
        self.source.close()

    def read(self, timeout_s: float) -> list[Observation]:
        if not self.source.available:
            if not self._warned_unavailable:  # said once, then quiet
                log.warning("GPU health: %s reads nothing: %s", self.name, self.source.why)
                self._warned_unavailable = True
            return []
        if self._busy is not None:  # still stuck in the last call
            if self._busy.is_alive():
                return []
            self._busy = None
            if self.hung_since is not None:
                log.warning("GPU health: %s answers again", self.name)
                self.hung_since = None
            return self._take()
        done = threading.Event()

        def call() -> None:
            try:
                self._result = self.source.read(timeout_s)
            except BaseException as exc:  # reported on the monitor's thread
                self._error = exc
            finally:
                done.set()

        worker = threading.Thread(target=call, name=f"tau-health-{self.name}", daemon=True)
        worker.start()
        if done.wait(timeout_s + self.deadline_s):
            return self._take()
        self._busy = worker
        self.hung_since = self._clock()
        log.warning("GPU health: a %s read is past its %.0f s deadline", self.name, self.deadline_s)
        return [
            Observation(
                Kind.NVML_HANG,
                "",
                self.node,
                self.hung_since,
                detail=f"a {self.name} read did not return within {self.deadline_s:g} s",
                source=self.name,
            )
        ]

    def _take(self) -> list[Observation]:
        out, self._result = self._result, []
        error, self._error = self._error, None
        if error is not None:
            log.warning("GPU health: %s failed: %s", self.name, error)
        return out
