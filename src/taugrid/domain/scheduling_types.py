"""The scheduler's outputs: admissions, preemptions, pending reasons, queue usage. Pure."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from taugrid.domain.quota import Resource, Workload

PendingReason = Literal[
    "WaitingForQuota",
    "WaitingForPreemptedWorkloads",
    "UserLimit",
    "BlockedByHead",
    "NoMatchingFlavor",
    "ExceedsMaxQuota",
    "QueueNotFound",
]


@dataclass(frozen=True)
class Admission:
    workload_id: str
    cluster_queue: str
    flavor: str
    borrowed: Mapping[Resource, int]  # amount taken beyond nominal (only resources > 0)


@dataclass(frozen=True)
class Preemption:
    victim_id: str
    preemptor_id: str
    reason: Literal["InClusterQueue", "InCohortReclamation"]
    message: str


@dataclass(frozen=True)
class Pending:
    workload_id: str
    cluster_queue: str
    position: int  # 1-based in its queue's order
    reason: str  # a PendingReason
    message: str


@dataclass(frozen=True)
class Decisions:
    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    pending: Mapping[str, Pending]


@dataclass(frozen=True)
class QueueUsage:
    cluster_queue: str
    cohort: str | None
    quota: Mapping[str, Mapping[Resource, int]]  # flavor -> resource -> nominal
    used: Mapping[str, Mapping[Resource, int]]
    borrowed: Mapping[str, Mapping[Resource, int]]
    pending: int
    running: int


def queue_order(w: Workload) -> tuple[int, float, str]:
    """Kueue's order within a ClusterQueue: priority descending, then FIFO, then id."""
    return (-w.priority, w.created, w.id)


class Overlaid(Mapping[str, Pending]):
    """``over`` in front of ``under``: the engine's own words for a few runs (a full disk,
    no free device) over the scheduler's explanations, without copying those."""

    def __init__(self, over: Mapping[str, Pending], under: Mapping[str, Pending]) -> None:
        self._over = over
        self._under = under

    def __getitem__(self, key: str) -> Pending:
        found = self._over.get(key)
        return found if found is not None else self._under[key]

    def __contains__(self, key: object) -> bool:
        return key in self._over or key in self._under

    def __iter__(self) -> Iterator[str]:
        yield from self._over
        yield from (k for k in self._under if k not in self._over)

    def __len__(self) -> int:
        return len(self._over) + sum(1 for k in self._under if k not in self._over)
