"""Admission decisions over a plain snapshot. Pure.

Until the policy-driven scheduler lands this is a capacity check in FIFO order: a run is
admitted when the GPUs it asks for are free, and it gets specific GPU indices. The
scheduler that replaces it keeps this shape: snapshot in, decisions out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PendingRun:
    run_id: str
    gpus: int
    queued_seq: int  # FIFO order


@dataclass(frozen=True)
class Capacity:
    gpu_indices: tuple[int, ...]  # every GPU this machine offers
    in_use: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Admission:
    run_id: str
    gpu_indices: tuple[int, ...]


def decide_admissions(pending: Sequence[PendingRun], capacity: Capacity) -> list[Admission]:
    """Admit queued runs in FIFO order while their GPUs fit; the head blocks the rest.

    Strict FIFO keeps a large run from starving behind a stream of small ones; the
    scheduler issue adds BestEffortFIFO as a policy choice.
    """
    free = [i for i in capacity.gpu_indices if i not in capacity.in_use]
    out: list[Admission] = []
    for run in sorted(pending, key=lambda r: r.queued_seq):
        if run.gpus > len(free):
            break
        taken, free = free[: run.gpus], free[run.gpus :]
        out.append(Admission(run.run_id, tuple(taken)))
    return out


def never_fits(gpus: int, capacity: Capacity) -> bool:
    return gpus > len(capacity.gpu_indices)
