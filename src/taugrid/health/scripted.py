"""The scripted source: observations put in by hand (``tau admin health inject``, tests,
demos and drills) come out of ``read`` as if a real source had seen them."""

from __future__ import annotations

import queue

from taugrid.domain.health import Observation


class ScriptedSource:
    name = "scripted"
    available = True
    why = ""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Observation] = queue.SimpleQueue()

    def inject(self, obs: Observation) -> None:
        self._queue.put(obs)

    def read(self, timeout_s: float) -> list[Observation]:
        out: list[Observation] = []
        try:
            out.append(self._queue.get(timeout=max(0.0, timeout_s)))
        except queue.Empty:
            return out
        while True:  # and whatever else is waiting, in the order it came
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        return None
