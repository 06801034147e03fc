"""Retention: a finished run's unpacked code goes at once; its logs, outputs and
checkpoints stay until the retention period has passed. Records stay for good.

What removing means is the artifact store's business (a rename and a background removal
on the local disk; objects or a PVC path on a cluster); when is decided here."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from taugrid.domain.states import Reason
from taugrid.ports.artifacts import ArtifactStore
from taugrid.store.runs import RunStore

log = logging.getLogger("taugrid.housekeeping")
SWEEP_EVERY_S = 3600.0


class Housekeeping:
    def __init__(
        self,
        store: RunStore,
        artifacts: ArtifactStore,
        retention_s: float | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.artifacts = artifacts
        self.retention_s = retention_s  # None: keep files for ever
        self.clock = clock
        self._swept_at: float | None = None

    def run_finished(self, run_id: str) -> None:
        self.artifacts.release_workdir(run_id)

    def sweep(self, *, force: bool = False) -> list[str]:
        """Remove the files of runs that finished more than the retention period ago."""
        now = time.monotonic()
        if self._swept_at is not None and not force and now - self._swept_at < SWEEP_EVERY_S:
            return []
        self._swept_at = now
        if self.retention_s is None:
            return []
        removed = []
        for run_id in self.store.finished_before(self.clock() - self.retention_s):
            if not self.artifacts.remove_run(run_id):
                continue
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
