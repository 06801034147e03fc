"""RunStore.summary: the one grouped read behind the metrics' run gauges, on real SQLite
and real PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from taugrid.domain.states import Reason, RunState
from taugrid.store import RunStore
from taugrid.store.runs import Move, Transition

S = RunState
SUBMIT = [Transition(S.PENDING, Reason.SUBMITTED, "s"), Transition(S.QUEUED, Reason.QUEUED, "q")]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def row(run_id: str, workspace: str, queue: str, gpus: int) -> dict[str, Any]:
    return dict(
        id=run_id,
        name="train",
        workspace=workspace,
        queue=queue,
        priority=None,
        submitter="me",
        idempotency_key=None,
        spec_source="tau.yaml",
        spec_file_text=None,
        spec_overrides=[],
        spec_resolved={"command": "x"},
        spec_hash="h" * 64,
        snapshot_digest="d" * 64,
        env_summary={},
        gpus=gpus,
    )


def test_summary_counts_runs_and_gpus_per_state_workspace_and_queue(engine: Engine) -> None:
    clock = Clock()
    store = RunStore(engine, clock)
    assert store.summary() == []
    for i, (ws, queue, gpus) in enumerate(
        [("a", "gpu", 2), ("a", "gpu", 4), ("a", "cpu", 0), ("b", "gpu", 1)]
    ):
        clock.now = 1000.0 + i
        store.create_run(row(f"r-{i}", ws, queue, gpus), SUBMIT)
    admitted = Transition(S.ADMITTED, Reason.ADMITTED, "admitted")
    store.transition_many(
        [Move("r-1", admitted, new_attempt={"placement": {}, "attempt_dir": "x"})]
    )
    got = {(r["state"], r["workspace"], r["queue"]): r for r in store.summary()}
    assert {k: (r["runs"], r["gpus"], r["created_at"]) for k, r in got.items()} == {
        ("QUEUED", "a", "gpu"): (1, 2, 1000.0),
        ("ADMITTED", "a", "gpu"): (1, 4, 1001.0),
        ("QUEUED", "a", "cpu"): (1, 0, 1002.0),
        ("QUEUED", "b", "gpu"): (1, 1, 1003.0),
    }
