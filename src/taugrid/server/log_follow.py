"""Following a run's log without holding a thread while it waits.

The stream is an async generator on the server's event loop: reads from the log source
and looks at the store go to the thread pool one at a time, and between them it waits on
``RunChanges`` (woken the moment the run moves) with a short timeout for the log to grow.
A follower that waits costs a coroutine, not one of the pool's threads, so a hundred
``tau logs -f`` cannot starve the API.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from anyio import to_thread

from taugrid.domain.states import RunState
from taugrid.errors import NotFound
from taugrid.ports.executor import AttemptKey
from taugrid.ports.logs import LogSource
from taugrid.server.changes import RunChanges
from taugrid.store.runs import Row, RunStore

S = RunState
LOG_CHUNK = 64 * 1024
GROW_POLL_S = 0.1  # how soon a line the workload wrote reaches a follower
RECHECK_S = 1.0  # how often the end of the attempt is looked for without a change
ARCHIVE_GRACE_S = 15.0  # how long an ended attempt's log archive may take to complete
_LIVE = (S.ADMITTED, S.RUNNING, S.QUEUED, S.PENDING)


@dataclass(frozen=True)
class LogRequest:
    run_id: str
    attempt: int | None  # None: the run has no attempt yet (following waits for its first)
    tail: int | None
    follow: bool
    rank: int | None = None  # one rank (a cluster attempt's pod) only


class LogFollower:
    def __init__(
        self,
        store: RunStore,
        logs: LogSource,
        changes: RunChanges,
        resolve: Callable[[str], Row],
    ) -> None:
        self.store = store
        self.logs = logs
        self.changes = changes
        self.resolve = resolve  # a ref to the run, as the caller may see it

    def request(
        self,
        ref: str,
        attempt: int | None,
        tail: int | None,
        follow: bool,
        rank: int | None = None,
    ) -> LogRequest:
        """Check the request before the response starts (404s are answered as such)."""
        run = self.resolve(ref)
        if run["attempt_count"] == 0:
            return LogRequest(run["id"], None, tail, follow, rank)
        k = run["attempt_count"] - 1 if attempt is None else attempt
        if not 0 <= k < run["attempt_count"]:
            raise NotFound(f"run {run['id']} has no attempt {k}")
        return LogRequest(run["id"], k, tail, follow, rank)

    async def stream(self, req: LogRequest) -> AsyncIterator[bytes]:
        k = req.attempt
        if k is None:
            if not req.follow:
                return
            k = await self._first_attempt(req.run_id)
            if k is None:
                return  # it finished without ever starting
        key = AttemptKey(req.run_id, k)
        f = await to_thread.run_sync(lambda: self.logs.open(key, tail=req.tail, rank=req.rank))
        while f is None and req.follow and not await self._over(key):
            await self.changes.wait(req.run_id, GROW_POLL_S)
            f = await to_thread.run_sync(lambda: self.logs.open(key, tail=req.tail, rank=req.rank))
        if f is None:
            return
        try:
            # The end of the attempt is looked for when the run moved, and at least every
            # RECHECK_S (a change may not pass through RunChanges).
            look_at, woke = 0.0, False
            while True:
                chunk = await to_thread.run_sync(f.read, LOG_CHUNK)
                if chunk:
                    yield chunk
                    continue
                if not req.follow:
                    return
                if woke or time.monotonic() >= look_at:
                    if await self._over(key):
                        # Written before the end; a cluster attempt's archive may still be
                        # catching up with its pods (the last read after a pod's end).
                        until = time.monotonic() + ARCHIVE_GRACE_S
                        while True:
                            rest = await to_thread.run_sync(f.read)
                            if rest:
                                yield rest
                            if getattr(f, "complete", True) or time.monotonic() > until:
                                return
                            await self.changes.wait(req.run_id, GROW_POLL_S)
                    look_at = time.monotonic() + RECHECK_S
                woke = await self.changes.wait(req.run_id, GROW_POLL_S)
        finally:
            f.close()

    async def _first_attempt(self, run_id: str) -> int | None:
        while True:
            run = await to_thread.run_sync(self.store.get, run_id)
            if run is None:
                return None
            if run["attempt_count"] > 0:
                return 0
            if RunState(run["state"]).terminal:
                return None
            await self.changes.wait(run_id, RECHECK_S)

    async def _over(self, key: AttemptKey) -> bool:
        run = await to_thread.run_sync(self.store.get, key.run_id)
        if run is None or run["attempt_count"] - 1 > key.attempt:
            return True
        return RunState(run["state"]) not in _LIVE
