"""A clock a test moves by hand, whose ``sleep`` only moves it (and remembers each wait):
for code that takes ``clock`` and ``sleep`` as arguments, so backoffs and deadlines are
checked without waiting for them."""

from __future__ import annotations


class SleepingClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s
