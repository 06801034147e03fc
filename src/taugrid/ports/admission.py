"""The admission port: what an external admitter (Kueue on a cluster; a test admitter
here) reports, for the engine's observed admission strategy to record.

Contract: ``drain`` returns the events since the last call, in the order they happened,
without blocking; an event for a run the admitter no longer knows is still reported (the
engine ignores what does not apply).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from taugrid.ports.executor import Placement


class AdmissionKind(StrEnum):
    ADMITTED = "admitted"  # quota reserved and the workload may start
    EVICTED = "evicted"  # it must stop and go back to its queue (Kueue's Evicted)
    PREEMPTED = "preempted"  # evicted to make room for another workload


@dataclass(frozen=True)
class AdmissionEvent:
    kind: AdmissionKind
    run_id: str
    message: str
    placement: Placement | None = None  # for ADMITTED


class AdmissionSource(Protocol):
    def drain(self) -> list[AdmissionEvent]: ...
