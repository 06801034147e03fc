"""Disk housekeeping: a finished run's unpacked workdir goes at once; its logs, outputs
and checkpoints stay until the retention period has passed. Records stay for good."""

from __future__ import annotations

import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from taugrid.domain.states import Reason
from taugrid.executors.local.executor import LocalExecutor
from taugrid.store.runs import RunStore

log = logging.getLogger("taugrid.housekeeping")
SWEEP_EVERY_S = 3600.0
# A finished run's workdir is renamed to this (plus a random suffix) inside its run
# directory, then removed in the background.
REMOVING_PREFIX = ".workdir.removing."


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
        self._removals: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._remover: threading.Thread | None = None
        self._remover_lock = threading.Lock()

    def run_finished(self, run_id: str) -> None:
        """The workdir is a copy of the code snapshot, which stays: `tau resume` and
        `tau rerun` unpack it again. Logs, outputs and checkpoints live beside it.

        It is gone from its place at once (one rename, so a resume unpacks a fresh one
        and never races the removal); deleting its files, as many as the user's code
        has, happens on a thread of its own, off the engine's pass."""
        workdir = self.executor.workdir(run_id)
        aside = workdir.with_name(REMOVING_PREFIX + os.urandom(4).hex())
        try:
            os.rename(workdir, aside)
        except FileNotFoundError:
            return
        except OSError:
            shutil.rmtree(workdir, ignore_errors=True)
            return
        self._remove_later(aside)

    def _remove_later(self, path: Path | None) -> None:
        """Queue ``path`` for removal; None: look for what a previous server left."""
        self._removals.put(path)
        with self._remover_lock:
            if self._remover is None:
                self._remover = threading.Thread(
                    target=self._remove_forever, name="tau-remover", daemon=True
                )
                self._remover.start()

    def _remove_forever(self) -> None:
        while True:
            path = self._removals.get()
            for p in self.left_behind() if path is None else [path]:
                shutil.rmtree(p, ignore_errors=True)

    def left_behind(self) -> list[Path]:
        """Workdirs set aside for removal that a previous server did not finish removing."""
        return sorted(self.executor.runs_root.glob(f"*/{REMOVING_PREFIX}*"))

    def sweep(self, *, force: bool = False) -> list[str]:
        """Remove the files of runs that finished more than the retention period ago."""
        now = time.monotonic()
        if self._swept_at is None:  # the first sweep of this server: a look in the background
            self._remove_later(None)
        elif not force and now - self._swept_at < SWEEP_EVERY_S:
            return []
        self._swept_at = now
        if self.retention_s is None:
            return []
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
