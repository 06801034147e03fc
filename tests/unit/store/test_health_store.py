"""GPU health records on real SQLite and PostgreSQL: a quarantine keeps the first fault
time and the worst level, a return needs it to be out, and events come back newest first
with their filters."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from taugrid.store.health import HealthStore


def event(at: float, level: int, **kw: Any) -> dict[str, Any]:
    return {
        "at": at,
        "node": "local",
        "gpu": "GPU-0",
        "gpu_index": 0,
        "source": "scripted",
        "kind": "xid",
        "xid": 79,
        "level": level,
        "action": "quarantine_gpu",
        "outcome": "applied",
        "reason": "Xid 79",
        **kw,
    }


def test_a_quarantine_keeps_its_first_fault_and_worst_level(engine: Engine) -> None:
    hs = HealthStore(engine, clock=lambda: 500.0)
    first = hs.take_out(
        [("GPU-0", 0)],
        node="local",
        level=3,
        reason="Xid 79",
        fault_at=100.0,
        event=event(100.0, 3),
    )
    hs.take_out(
        [("GPU-0", 0)],
        node="local",
        level=2,
        reason="Xid 94",
        fault_at=200.0,
        event=event(200.0, 2, xid=94),
    )
    hs.take_out(
        [("GPU-0", 0)],
        node="local",
        level=4,
        reason="RMA",
        fault_at=300.0,
        event=event(300.0, 4),
    )
    (row,) = hs.quarantined()
    assert (row["fault_at"], row["level"], row["reason"]) == (100.0, 4, "Xid 79")
    hs.set_runs(first, ["train-x7k2p"])
    events = hs.events()
    assert [e["at"] for e in events] == [300.0, 200.0, 100.0]
    assert events[-1]["runs"] == ["train-x7k2p"]
    assert [e["at"] for e in hs.events(since=150.0, min_level=3)] == [300.0]


def test_a_return_puts_it_back_once_and_a_new_fault_starts_afresh(engine: Engine) -> None:
    hs = HealthStore(engine, clock=lambda: 500.0)
    hs.take_out(
        [("GPU-1", 1)],
        node="local",
        level=2,
        reason="ECC",
        fault_at=10.0,
        event=event(10.0, 2, gpu="GPU-1", gpu_index=1),
    )
    back = event(20.0, 0, gpu="GPU-1", gpu_index=1, kind="returned", action="return")
    assert hs.release("GPU-1", "alice", back)
    assert not hs.release("GPU-1", "alice", back)  # not out any more: nothing recorded
    assert hs.quarantined() == []
    (row,) = hs.gpus()
    assert row["state"] == "returned" and row["updated_by"] == "alice"
    assert [e["kind"] for e in hs.events()] == ["returned", "xid"]
    hs.take_out(
        [("GPU-1", 1)],
        node="local",
        level=2,
        reason="ECC again",
        fault_at=30.0,
        event=event(30.0, 2, gpu="GPU-1", gpu_index=1),
    )
    (row,) = hs.quarantined()
    assert (row["fault_at"], row["reason"], row["updated_by"]) == (30.0, "ECC again", "monitor")
