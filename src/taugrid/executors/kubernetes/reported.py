"""What cluster pods reported about files the server cannot see (``ports.pod_reports``),
kept on the server's disk under ``$TAU_HOME/kubernetes/reports/<run id>/``:

- ``attempts/<k>/metrics.jsonl``: the server's copy of the attempt's metrics file,
  grown only at its end by offset (so ``tau metrics``, ``metrics_last`` and the
  "progressing" words read it as they read a local run's);
- ``checkpoints.json``: the ``step-*`` directories the run's pods last saw on the
  workspace's PVC, each with its manifest and the pod's verdict after hashing every
  file, from which the resume point is chosen by the SDK's own walk (``pick_resume``).

Nothing here is trusted more than the pod that sent it: manifests are parsed by the
SDK's ``parse_manifest`` and sizes are bounded. The metrics copy is not fsynced (the
pod's file is the original: after a crash the sender is told the shorter size and
sends the rest again); the checkpoint list is replaced atomically and durably.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

from taugrid.domain.runid import DNS1123_LABEL
from taugrid.errors import UsageError
from taugrid.fsdurable import fsync_dir
from taugrid.ports.executor import AttemptKey
from taugrid.ports.pod_reports import OffsetAhead, ReportedCheckpoint, ReportTooLarge
from taugrid.sdk._store import (
    CheckpointInfo,
    info_from_manifest,
    parse_manifest,
    pick_resume,
    step_dir_name,
)

MAX_METRICS_BYTES = 256 << 20  # one attempt's metrics; beyond it the copy stops growing
MAX_CHECKPOINTS = 1000  # step directories in one report
MAX_MANIFEST_CHARS = 4 << 20


class ReportedFiles:
    def __init__(self, root: Path, checkpoint_dir: str) -> None:
        self.root = root
        self.checkpoint_dir = checkpoint_dir  # where the pods see them (the paths shown)
        self._lock = threading.Lock()

    def _run_dir(self, run_id: str) -> Path:
        if not DNS1123_LABEL.match(run_id):
            raise UsageError(f"not a run id: {run_id!r}")
        return self.root / run_id

    def metrics_path(self, key: AttemptKey) -> Path:
        if key.attempt < 0:
            raise UsageError(f"not an attempt: {key.attempt}")
        return self._run_dir(key.run_id) / "attempts" / str(key.attempt) / "metrics.jsonl"

    # -- metrics --------------------------------------------------------------------------
    def append_metrics(self, key: AttemptKey, offset: int, data: bytes) -> int:
        if offset < 0:
            raise UsageError("offset must be >= 0")
        path = self.metrics_path(key)
        with self._lock:  # one writer per file: the check and the append are one step
            size = path.stat().st_size if path.exists() else 0
            if offset > size:
                raise OffsetAhead(size)
            new = data[size - offset :]
            if not new:
                return size
            if size + len(new) > MAX_METRICS_BYTES:
                raise ReportTooLarge(
                    f"attempt {key.attempt} of run {key.run_id} has over "
                    f"{MAX_METRICS_BYTES >> 20} MiB of metrics; no more are kept"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, new)
            finally:
                os.close(fd)
            return size + len(new)

    def read_metrics(self, key: AttemptKey, offset: int, limit: int) -> bytes:
        try:
            with open(self.metrics_path(key), "rb") as f:
                f.seek(offset)
                return f.read(limit)
        except FileNotFoundError:
            return b""

    # -- checkpoints ----------------------------------------------------------------------
    def put_checkpoints(self, key: AttemptKey, entries: list[ReportedCheckpoint]) -> None:
        if len(entries) > MAX_CHECKPOINTS:
            raise ReportTooLarge(f"{len(entries)} checkpoints in one report (at most 1000)")
        for e in entries:
            if e.step < 0 or (e.manifest is not None and len(e.manifest) > MAX_MANIFEST_CHARS):
                raise UsageError(f"checkpoint step {e.step}: not a step or manifest too big")
        run_dir = self._run_dir(key.run_id)
        path = run_dir / "checkpoints.json"
        doc = {
            "attempt": key.attempt,
            "checkpoints": [e.__dict__ for e in sorted(entries, key=lambda e: -e.step)],
        }
        with self._lock:
            stored = self._read(path)
            last = stored.get("attempt") if stored is not None else None
            if isinstance(last, int) and last > key.attempt:
                return  # a late word from an attempt that is over
            run_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            with open(tmp, "w") as f:
                json.dump(doc, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(run_dir)

    def _read(self, path: Path) -> dict[str, object] | None:
        try:
            doc = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def _reported(self, run_id: str) -> list[tuple[int, ReportedCheckpoint]]:
        doc = self._read(self._run_dir(run_id) / "checkpoints.json") or {}
        raw = doc.get("checkpoints")
        out = []
        for e in raw if isinstance(raw, list) else []:
            try:
                entry = ReportedCheckpoint(int(e["step"]), e.get("manifest"), e.get("problem"))
            except (KeyError, TypeError, ValueError):
                continue
            out.append((entry.step, entry))
        return sorted(out, key=lambda se: -se[0])

    def _info(self, entry: ReportedCheckpoint, step: int, _full: bool) -> CheckpointInfo:
        path = Path(f"{self.checkpoint_dir}/{step_dir_name(step)}")
        if entry.manifest is None:
            return info_from_manifest(path, step, None, entry.problem, lambda _: None)
        manifest, problem = parse_manifest(entry.manifest.encode())
        # The pod hashed every file: its verdict stands for both levels of checking.
        return info_from_manifest(path, step, manifest, problem, lambda _: entry.problem)

    def checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        return [self._info(e, step, True) for step, e in self._reported(run_id)]

    def resume_point(
        self, run_id: str, *, fault_at: float | None = None
    ) -> tuple[CheckpointInfo | None, list[CheckpointInfo]]:
        return pick_resume(
            self._reported(run_id), self._info, exclude_written_after=fault_at, full=True
        )

    def remove_run(self, run_id: str) -> bool:
        run_dir = self._run_dir(run_id)
        if not run_dir.exists():
            return False
        shutil.rmtree(run_dir, ignore_errors=True)
        return True
