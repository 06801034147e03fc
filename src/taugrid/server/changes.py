"""Waking whoever waits for a run to change (a followed log, the event feed's long poll,
the portal's SSE later) the moment it does, without a thread per waiter.

The engine says which runs moved after each commit; a waiter is an asyncio event on the
loop that awaits it, set from the engine's thread with ``call_soon_threadsafe``. A wait
always has a timeout: what changed may not pass through here (an older server's run
finishing, a log growing), so waiters look again now and then.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable

ANY = "*"  # waits for any run


class RunChanges:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def notify(self, run_ids: Iterable[str]) -> None:
        """Called from any thread once the changes of these runs are durable."""
        ids = set(run_ids)
        if not ids:
            return
        with self._lock:
            woken = [w for rid in (*ids, ANY) for w in self._waiters.pop(rid, ())]
        for loop, event in woken:
            # A loop that has closed has nobody waiting on it any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    async def wait(self, run_id: str, timeout: float) -> bool:
        """Until ``run_id`` (or ``ANY``) changes or ``timeout`` passes; True if it changed."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.setdefault(run_id, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                left = self._waiters.get(run_id)
                if left is not None:
                    left.discard(waiter)
                    if not left:
                        del self._waiters[run_id]
