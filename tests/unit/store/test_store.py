"""RunStore against real SQLite and real PostgreSQL."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine

from taugrid.domain.states import Reason, RunState
from taugrid.errors import Ambiguous, Conflict, NotFound
from taugrid.store import RunStore, connect
from taugrid.store.runs import RunFilter, Transition
from taugrid.store.tables import metadata

S = RunState
SUBMIT = [Transition(S.PENDING, Reason.SUBMITTED, "s"), Transition(S.QUEUED, Reason.QUEUED, "q")]


def row(run_id: str, key: str | None = None, name: str = "train") -> dict[str, Any]:
    return dict(
        id=run_id,
        name=name,
        workspace="default",
        queue="default",
        priority=None,
        submitter="me",
        idempotency_key=key,
        spec_source="tau.yaml",
        spec_file_text="command: x",
        spec_overrides=["a=1"],
        spec_resolved={"command": "x"},
        spec_hash="h" * 64,
        snapshot_digest="d" * 64,
        env_summary={"PATH": "/bin"},
        gpus=0,
    )


def test_migrations_produce_exactly_the_table_definitions(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_create_records_events_in_order(engine: Engine) -> None:
    store = RunStore(engine)
    run, created = store.create_run(row("train-aaaaa"), SUBMIT)
    assert created and run["state"] == "QUEUED" and run["attempt_count"] == 0
    assert [(e["from_state"], e["to_state"]) for e in store.events(run["id"])] == [
        (None, "PENDING"),
        ("PENDING", "QUEUED"),
    ]
    assert run["spec_resolved"] == {"command": "x"}


def test_idempotency_key_records_once_under_concurrency(engine: Engine) -> None:
    store = RunStore(engine)
    results: list[tuple[str, bool]] = []
    lock = threading.Lock()

    def submit(i: int) -> None:
        r, created = store.create_run(row(f"train-{i:05d}", key="same-key"), SUBMIT)
        with lock:
            results.append((r["id"], created))

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({rid for rid, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert store.count() == 1


def test_resolve_by_id_prefix_and_name(engine: Engine) -> None:
    store = RunStore(engine)
    store.create_run(row("train-abc12"), SUBMIT)
    store.create_run(row("train-abd34"), SUBMIT)
    store.create_run(row("eval-zzzzz", name="eval"), SUBMIT)
    assert store.resolve("train-abc12")["id"] == "train-abc12"
    assert store.resolve("train-abd")["id"] == "train-abd34"
    assert store.resolve("eval")["id"] == "eval-zzzzz"
    store.create_run(row("train-zzzzz", name="train"), SUBMIT)
    assert store.resolve("train")["id"] == "train-zzzzz"  # a name beats a prefix
    with pytest.raises(Ambiguous):
        store.resolve("train-ab")
    with pytest.raises(NotFound):
        store.resolve("nope")
    with pytest.raises(NotFound):
        store.resolve("train_%")  # LIKE wildcards are matched literally


def test_list_filters_and_cursor_pagination(engine: Engine) -> None:
    clock = iter(float(i) for i in range(1000))
    store = RunStore(engine, clock=lambda: next(clock))
    for i in range(7):
        store.create_run(row(f"r-{i:05d}", name="a" if i % 2 else "b"), SUBMIT)
    page1 = store.list_runs(RunFilter(), limit=3)
    assert [r["id"] for r in page1] == ["r-00006", "r-00005", "r-00004"]
    last = page1[-1]
    page2 = store.list_runs(RunFilter(), limit=3, before=(last["created_at"], last["id"]))
    assert [r["id"] for r in page2] == ["r-00003", "r-00002", "r-00001"]
    assert {r["name"] for r in store.list_runs(RunFilter(name="a"))} == {"a"}
    assert store.list_runs(RunFilter(states=["RUNNING"])) == []


def test_transition_is_checked_and_creates_attempts(engine: Engine) -> None:
    store = RunStore(engine)
    store.create_run(row("t-00001"), SUBMIT)
    with pytest.raises(Conflict):
        store.transition("t-00001", Transition(S.RUNNING, Reason.STARTED, "skip"))
    store.transition(
        "t-00001",
        Transition(S.ADMITTED, Reason.ADMITTED, "a"),
        new_attempt={"placement": {"gpus": [0]}, "attempt_dir": "/x"},
    )
    store.transition(
        "t-00001",
        Transition(S.RUNNING, Reason.STARTED, "r"),
        fields={"started_at": 5.0},
        attempt_update={"started_at": 5.0},
    )
    done = store.transition(
        "t-00001",
        Transition(S.SUCCEEDED, Reason.COMPLETED, "ok"),
        fields={"exit_code": 0},
        attempt_update={"exit_code": 0},
    )
    assert done["state"] == "SUCCEEDED" and done["attempt_count"] == 1
    (att,) = store.attempts("t-00001")
    assert att["placement"] == {"gpus": [0]} and att["exit_code"] == 0 and att["started_at"] == 5.0
    with pytest.raises(Conflict):
        store.transition("t-00001", Transition(S.CANCELLED, Reason.CANCELLED, "late"))
    assert [e["to_state"] for e in store.events("t-00001")][-1] == "SUCCEEDED"


def test_state_survives_reconnect(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tau.db'}"
    eng = connect(url)
    RunStore(eng).create_run(row("keep-00001"), SUBMIT)
    eng.dispose()
    eng2 = connect(url)
    try:
        assert RunStore(eng2).get("keep-00001") is not None
    finally:
        eng2.dispose()


def test_queued_in_fifo_order_and_gpus_in_use(engine: Engine) -> None:
    store = RunStore(engine)
    for i, gpus in enumerate((2, 1, 0)):
        store.create_run({**row(f"g-{i:05d}"), "gpus": gpus}, SUBMIT)
    assert [(r["id"], r["gpus"]) for r in store.in_states([S.QUEUED])] == [
        ("g-00000", 2),
        ("g-00001", 1),
        ("g-00002", 0),
    ]
    store.transition(
        "g-00000",
        Transition(S.ADMITTED, Reason.ADMITTED, "a"),
        new_attempt={"placement": {"gpus": [0, 3]}, "attempt_dir": "/a"},
    )
    store.transition(
        "g-00001",
        Transition(S.ADMITTED, Reason.ADMITTED, "a"),
        new_attempt={"placement": {"gpus": [1]}, "attempt_dir": "/b"},
    )
    store.transition("g-00001", Transition(S.FAILED, Reason.START_FAILED, "x"))
    assert store.gpus_in_use() == {0, 3}  # a finished run frees its GPUs
    assert [r["id"] for r in store.in_states([S.QUEUED])] == ["g-00002"]
