"""Where each queued attempt stands in Kueue's queues, from Kueue's visibility API
(``pendingworkloads`` of each LocalQueue that holds one of TauGrid's waiting attempts).

The Workload conditions say why an attempt waits; only the visibility API says how many
are ahead of it. It is asked on a thread of its own every ``every_s`` seconds, for the
LocalQueues that hold attempts Kueue has not admitted, never on the engine's thread. A
cluster whose Kueue does not serve it (an older Kueue, RBAC) answers nothing: positions
are then simply unknown, said once in the log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from taugrid.executors.kubernetes.client import KubeClient, KubeError
from taugrid.ports.executor import AttemptKey

log = logging.getLogger("taugrid.kubernetes")


@dataclass(frozen=True)
class Position:
    in_cluster_queue: int  # 1 = next to be considered
    in_local_queue: int
    local_queue: str


def positions_of(
    items: Iterable[Mapping[str, Any]], local_queue: str, owners: Mapping[str, AttemptKey]
) -> dict[AttemptKey, Position]:
    """The visibility API's answer for one LocalQueue, as positions of TauGrid's attempts
    (``owners``: the name of each attempt's Job or RayJob). Pure."""
    out: dict[AttemptKey, Position] = {}
    for item in items:
        meta = item.get("metadata") or {}
        for owner in meta.get("ownerReferences") or []:
            key = owners.get(str(owner.get("name", "")))
            if key is not None:
                out[key] = Position(
                    int(item.get("positionInClusterQueue") or 0) + 1,
                    int(item.get("positionInLocalQueue") or 0) + 1,
                    local_queue,
                )
    return out


class QueuePositions:
    """``waiting()`` gives the attempts to place: (attempt, namespace, object name,
    LocalQueue) of every attempt Kueue has not admitted."""

    def __init__(
        self,
        client: KubeClient,
        waiting: Callable[[], list[tuple[AttemptKey, str, str, str]]],
        every_s: float = 5.0,
    ) -> None:
        self.client = client
        self.waiting = waiting
        self.every_s = every_s
        self._lock = threading.Lock()
        self._positions: dict[AttemptKey, Position] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def get(self, key: AttemptKey) -> Position | None:
        with self._lock:
            return self._positions.get(key)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tau-k8s-positions", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.refresh()
            except Exception:
                log.exception("reading Kueue's queue positions failed")

    def refresh(self) -> None:
        groups: dict[tuple[str, str], dict[str, AttemptKey]] = {}
        for key, namespace, name, queue in self.waiting():
            groups.setdefault((namespace, queue), {})[name] = key
        found: dict[AttemptKey, Position] = {}
        for (namespace, queue), owners in groups.items():
            try:
                items = self.client.pending_workloads(namespace, queue)
            except KubeError as exc:
                if not self._failing:
                    log.warning("Kueue's visibility API: %s (queue positions unknown)", exc)
                self._failing = True
                continue
            self._failing = False
            found.update(positions_of(items, queue, owners))
        with self._lock:
            self._positions = found
