"""Which attempts this server created on the cluster, durably: one small file per attempt
under ``$TAU_HOME/kubernetes/attempts``.

Why a file and not the cluster's word: an attempt whose objects vanished (deleted by
hand, a TTL, a namespace gone) must read as launched-and-lost after a server restart,
never as not-yet-launched, or the engine would start it a second time. The entry is
written after every object exists (a crash before that leaves objects that the retried
launch adopts), and it records a stop once one is sent, so that an attempt stopped for a
preemption still ends as a preemption when the server restarts in the middle.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from taugrid.domain.stops import StopReason, parse_stop_reason
from taugrid.fsdurable import fsync_dir
from taugrid.ports.executor import AttemptKey


@dataclass(frozen=True)
class Entry:
    kind: str  # Job | RayJob
    namespace: str
    name: str
    launched_at: float
    stop: StopReason | None = None


class LaunchLedger:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.Lock()
        self._entries: dict[AttemptKey, Entry] = {}
        # Each run's recorded attempts: the admission source asks for the newest on every
        # Workload change, which a scan of every entry made grow with the runs.
        self._by_run: dict[str, set[int]] = {}
        for path in directory.glob("*.json"):
            entry = _read(path)
            key = _key_of(path.stem)
            if entry is not None and key is not None:
                self._entries[key] = entry
                self._by_run.setdefault(key.run_id, set()).add(key.attempt)

    def get(self, key: AttemptKey) -> Entry | None:
        with self._lock:
            return self._entries.get(key)

    def attempts(self) -> list[AttemptKey]:
        with self._lock:
            return list(self._entries)

    def newest_attempt(self, run_id: str) -> int | None:
        """The highest attempt recorded for the run; None when none is."""
        with self._lock:
            attempts = self._by_run.get(run_id)
            return max(attempts) if attempts else None

    def record(self, key: AttemptKey, kind: str, namespace: str, name: str) -> Entry:
        entry = Entry(kind, namespace, name, time.time())
        self._write(key, entry)
        return entry

    def stopped(self, key: AttemptKey, reason: StopReason) -> Entry | None:
        """Note the stop (the first one counts); None when the attempt is unknown."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or entry.stop is not None:
            return entry
        entry = Entry(entry.kind, entry.namespace, entry.name, entry.launched_at, reason)
        self._write(key, entry)
        return entry

    def forget(self, key: AttemptKey) -> None:
        with self._lock:
            self._entries.pop(key, None)
            attempts = self._by_run.get(key.run_id)
            if attempts is not None:
                attempts.discard(key.attempt)
                if not attempts:
                    del self._by_run[key.run_id]
        (self.directory / f"{_stem(key)}.json").unlink(missing_ok=True)

    def _write(self, key: AttemptKey, entry: Entry) -> None:
        path = self.directory / f"{_stem(key)}.json"
        tmp = path.with_suffix(".tmp")
        body = {
            "kind": entry.kind,
            "namespace": entry.namespace,
            "name": entry.name,
            "launched_at": entry.launched_at,
            "stop": entry.stop.value if entry.stop is not None else None,
        }
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(body, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.directory)
        with self._lock:
            self._entries[key] = entry
            self._by_run.setdefault(key.run_id, set()).add(key.attempt)


def _stem(key: AttemptKey) -> str:
    return f"{key.run_id}.{key.attempt}"


def _key_of(stem: str) -> AttemptKey | None:
    run_id, _, attempt = stem.rpartition(".")
    return AttemptKey(run_id, int(attempt)) if run_id and attempt.isdigit() else None


def _read(path: Path) -> Entry | None:
    try:
        body = json.loads(path.read_text())
        return Entry(
            str(body["kind"]),
            str(body["namespace"]),
            str(body["name"]),
            float(body["launched_at"]),
            parse_stop_reason(body.get("stop")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
