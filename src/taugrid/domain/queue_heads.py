"""The head of each cluster queue as one caller may see it: the first runs waiting, in
the scheduler's order, with why each waits. Pure.

Positions are the queue's own (a researcher whose first run waits behind two runs of
other workspaces sees it at ``#3``), so nobody is misled about their place; the runs of
workspaces the caller cannot read are left out, never named.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from taugrid.domain.scheduling_types import Pending

HEADS_SHOWN = 3


@dataclass(frozen=True)
class Head:
    run_id: str
    workspace: str
    position: int  # 1-based, in the whole queue
    reason: str  # a PendingReason (or the engine's own: DiskFull, WaitingForDevices, ...)
    message: str


def queue_heads(
    queued: Iterable[tuple[str, str]],
    pending: Mapping[str, Pending],
    readable: Collection[str] | None,
    most: int = HEADS_SHOWN,
) -> dict[str, list[Head]]:
    """Per cluster queue, its first ``most`` waiting runs that the caller may read.

    ``queued``: (run id, workspace) of the runs in state QUEUED now; ``pending``: the
    scheduler's explanations from its last pass, by run id (a run it has not looked at
    yet has none and is left out until it has); ``readable``: the caller's workspaces,
    or None for all of them (a platform admin).
    """
    by_queue: dict[str, list[Head]] = {}
    for run_id, workspace in queued:
        p = pending.get(run_id)
        if p is None or (readable is not None and workspace not in readable):
            continue
        head = Head(run_id, workspace, p.position, p.reason, p.message)
        by_queue.setdefault(p.cluster_queue, []).append(head)
    return {
        queue: sorted(heads, key=lambda h: (h.position, h.run_id))[:most]
        for queue, heads in by_queue.items()
    }
