"""The Kubernetes executor's small parts on plain data: the launch ledger (durable across
a restart), the admission source's edges, queue positions from the visibility API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taugrid.domain.stops import StopReason
from taugrid.executors.kubernetes.admission_source import KueueAdmissionSource
from taugrid.executors.kubernetes.ledger import LaunchLedger
from taugrid.executors.kubernetes.positions import Position, positions_of
from taugrid.ports.admission import AdmissionKind
from taugrid.ports.executor import AttemptKey

K0, K1 = AttemptKey("r-abcde", 0), AttemptKey("r-abcde", 1)


def test_the_ledger_survives_a_restart_with_its_stops(tmp_path: Path) -> None:
    ledger = LaunchLedger(tmp_path)
    ledger.record(K0, "Job", "team-a", "r-abcde-a0")
    ledger.stopped(K0, StopReason.PREEMPT)
    ledger.stopped(K0, StopReason.CANCEL)  # the first stop counts
    ledger.record(K1, "RayJob", "team-a", "r-abcde-a1")
    again = LaunchLedger(tmp_path)
    entry = again.get(K0)
    assert entry is not None and entry.stop is StopReason.PREEMPT and entry.kind == "Job"
    assert sorted(again.attempts()) == [K0, K1]
    again.forget(K0)
    assert LaunchLedger(tmp_path).get(K0) is None
    (tmp_path / "garbage.json").write_text("{not json")
    assert LaunchLedger(tmp_path).attempts() == [K1]  # an unreadable entry is skipped


def workload(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": {
            "conditions": list(conditions),
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"flavors": {"nvidia.com/gpu": "h100"}}],
            },
        }
    }


ADMITTED = (
    {"type": "QuotaReserved", "status": "True"},
    {"type": "Admitted", "status": "True"},
)


def test_admissions_are_edges_of_the_newest_unstopped_attempt(tmp_path: Path) -> None:
    ledger = LaunchLedger(tmp_path)
    source = KueueAdmissionSource(ledger)
    # Kueue was quicker than the ledger: nothing yet, then the edge once recorded.
    source.workload_changed(K0, workload(*ADMITTED))
    assert source.drain() == []
    ledger.record(K0, "Job", "ns", "r-abcde-a0")
    source.attempt_recorded(K0, workload(*ADMITTED))
    (event,) = source.drain()
    assert event.kind is AdmissionKind.ADMITTED and event.placement is not None
    assert event.placement.flavor == "h100"
    source.workload_changed(K0, workload(*ADMITTED))  # a resync: no new edge
    assert source.drain() == []
    # Evicted: a preemption event; once stopped, its re-admission speaks for nobody.
    evicted = workload(
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "room"},
        {"type": "Preempted", "status": "True", "reason": "InCohortReclamation"},
    )
    source.workload_changed(K0, evicted)
    (event,) = source.drain()
    assert event.kind is AdmissionKind.PREEMPTED and "InCohortReclamation" in event.message
    ledger.stopped(K0, StopReason.PREEMPT)
    source.workload_changed(K0, workload(*ADMITTED))
    assert source.drain() == []
    # An older attempt never speaks once a newer one exists.
    ledger.record(K1, "Job", "ns", "r-abcde-a1")
    source.workload_changed(K1, workload({"type": "QuotaReserved", "status": "False"}))
    assert source.pending("r-abcde", 1) == (None, "waiting for Kueue to look at it")


def test_positions_of_match_owners_and_count_from_one() -> None:
    items = [
        {
            "metadata": {"ownerReferences": [{"kind": "Job", "name": "r-abcde-a1"}]},
            "positionInClusterQueue": 4,
            "positionInLocalQueue": 0,
        },
        {"metadata": {"ownerReferences": [{"kind": "Job", "name": "someone-else"}]}},
    ]
    assert positions_of(items, "main", {"r-abcde-a1": K1}) == {K1: Position(5, 1, "main")}
