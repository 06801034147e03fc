"""Disk housekeeping: a finished run's unpacked workdir goes at once; its logs, outputs
and checkpoints stay until the retention period has passed. Records stay for good."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable

from taugrid.domain.states import Reason
from taugrid.executors.local.executor import LocalExecutor
from taugrid.store.runs import RunStore

log = logging.getLogger("taugrid.housekeeping")
SWEEP_EVERY_S = 3600.0


class Housekeeping:
    def __init__(
        self,
        store: RunStore,
        executor: LocalExecutor,
        retention_s: float | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.executor = executor
        self.retention_s = retention_s  # None: keep files for ever
        self.clock = clock
        self._swept_at: float | None = None

    def run_finished(self, run_id: str) -> None:
        """The workdir is a copy of the code snapshot, which stays: `tau resume` and
        `tau rerun` unpack it again. Logs, outputs and checkpoints live beside it."""
        shutil.rmtree(self.executor.workdir(run_id), ignore_errors=True)

    def sweep(self, *, force: bool = False) -> list[str]:
        """Remove the files of runs that finished more than the retention period ago."""
        now = time.monotonic()
        if self.retention_s is None:
            return []
        if not force and self._swept_at is not None and now - self._swept_at < SWEEP_EVERY_S:
            return []
        self._swept_at = now
        removed = []
        for run_id in self.store.finished_before(self.clock() - self.retention_s):
            run_dir = self.executor.run_dir(run_id)
            if not run_dir.exists():
                continue
            shutil.rmtree(run_dir, ignore_errors=True)
            days = self.retention_s / 86400
            self.store.note(
                run_id,
                Reason.FILES_REMOVED,
                f"logs, outputs and checkpoints removed: finished over {days:g} days ago",
            )
            removed.append(run_id)
        if removed:
            log.info("retention removed the files of %d runs", len(removed))
        return removed
