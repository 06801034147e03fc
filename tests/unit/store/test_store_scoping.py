"""Idempotency keys scoped to owner and workspace, snapshot records, and migration 0005
from a populated 0004 database, on real SQLite and real PostgreSQL."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, MetaData, Table, func, select, text
from test_store import SUBMIT, row  # same directory (pytest puts it on sys.path)

from taugrid.errors import IdempotencyKeyReused
from taugrid.store import RunStore, connect
from taugrid.store.db import MIGRATIONS_DIR
from taugrid.store.snapshots import SnapshotRecords
from taugrid.store.tables import events, runs


def keyed(run_id: str, key: str, *, owner: str, ws: str = "default", h: str = "a") -> Any:
    r = row(run_id, key=key)
    r.update(idempotency_owner=owner, workspace=ws, request_hash=h * 64)
    return r


def test_a_key_belongs_to_its_owner_in_its_workspace(engine: Engine) -> None:
    store = RunStore(engine)
    _, created = store.create_run(keyed("t-aaaaa", "k", owner="alice"), SUBMIT)
    assert created
    again, created = store.create_run(keyed("t-bbbbb", "k", owner="alice"), SUBMIT)
    assert (again["id"], created) == ("t-aaaaa", False)
    other_ws, created = store.create_run(keyed("t-ccccc", "k", owner="alice", ws="b"), SUBMIT)
    assert created and other_ws["id"] == "t-ccccc"
    other_owner, created = store.create_run(keyed("t-ddddd", "k", owner="bob"), SUBMIT)
    assert created and other_owner["id"] == "t-ddddd"
    assert store.count() == 3


def test_a_reused_key_with_another_request_is_refused_and_writes_nothing(engine: Engine) -> None:
    store = RunStore(engine)
    store.create_run(keyed("t-aaaaa", "k", owner="alice"), SUBMIT)
    with pytest.raises(IdempotencyKeyReused) as err:
        store.create_runs(
            [
                (keyed("t-bbbbb", "new", owner="alice"), SUBMIT),
                (keyed("t-ccccc", "k", owner="alice", h="b"), SUBMIT),
            ]
        )
    assert err.value.index == 1 and "different request" in err.value.message
    with pytest.raises(IdempotencyKeyReused):  # twice in one batch, two requests
        store.create_runs(
            [
                (keyed("t-ddddd", "x", owner="alice"), SUBMIT),
                (keyed("t-eeeee", "x", owner="alice", h="c"), SUBMIT),
            ]
        )
    assert store.count() == 1


def test_scoped_key_records_once_under_concurrency(engine: Engine) -> None:
    # PostgreSQL runs these writers concurrently: the unique index, then the retry, decide.
    store = RunStore(engine)
    results: list[tuple[str, bool]] = []
    lock = threading.Lock()

    def submit(i: int) -> None:
        r, created = store.create_run(keyed(f"t-{i:05d}", "same", owner="alice"), SUBMIT)
        with lock:
            results.append((r["id"], created))

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({rid for rid, _ in results}) == 1
    assert sum(created for _, created in results) == 1


def test_snapshot_records_are_per_workspace(engine: Engine) -> None:
    records = SnapshotRecords(engine)
    records.record("d" * 64, "a", "alice")
    records.record("d" * 64, "a", "bob")  # already there: the first upload is kept
    assert records.uploaded_for("d" * 64, "a")
    assert not records.uploaded_for("d" * 64, "b")
    assert not records.uploaded_for("e" * 64, "a")


def _at_0004(url: str) -> Engine:
    engine = connect(url, migrate=False)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0004")
    return engine


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tau.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_migration_0005_keeps_events_and_attempts_and_backfills(url: str) -> None:
    old = _at_0004(url)
    meta = MetaData()
    old_runs, old_events, old_attempts = (
        Table(name, meta, autoload_with=old) for name in ("runs", "events", "attempts")
    )
    with old.begin() as conn:  # rows as the 0004 server wrote them
        for i, (ws, key) in enumerate([("a", "k1"), ("a", None), ("b", "k2")]):
            r = row(f"old-{i:05d}", key=key)
            r.update(
                workspace=ws,
                snapshot_digest=("d" if ws == "a" else "e") * 64,
                state="QUEUED",
                reason="Queued",
                message="q",
                created_at=100.0 + i,
                updated_at=100.0 + i,
                queued_seq=i + 1,
                attempt_count=1 if i == 0 else 0,
            )
            conn.execute(old_runs.insert().values(**r))
            for step in ("PENDING", "QUEUED"):
                conn.execute(
                    old_events.insert().values(
                        run_id=r["id"], at=1.0, to_state=step, reason="r", message="m"
                    )
                )
        conn.execute(
            old_attempts.insert().values(
                run_id="old-00000", attempt=0, created_at=1.0, placement={}, attempt_dir="/x"
            )
        )
    old.dispose()

    new = connect(url)  # upgrades to head
    try:
        with new.connect() as conn:
            assert conn.execute(select(func.count()).select_from(events)).scalar() == 6
            assert conn.execute(text("SELECT count(*) FROM attempts")).scalar() == 1
            owners = dict(conn.execute(select(runs.c.id, runs.c.idempotency_owner)).all())
            recorded = set(conn.execute(text("SELECT digest, workspace FROM snapshot_workspaces")))
        assert owners == {"old-00000": "me", "old-00001": None, "old-00002": "me"}
        assert recorded == {("d" * 64, "a"), ("e" * 64, "b")}
        store = RunStore(new)
        # An old key is answered with its run (no request hash was kept for it) ...
        again, created = store.create_run(keyed("new-aaaaa", "k1", owner="me", ws="a"), SUBMIT)
        assert (again["id"], created) == ("old-00000", False)
        # ... and the same key is free in another workspace now.
        _, created = store.create_run(keyed("new-bbbbb", "k1", owner="me", ws="b"), SUBMIT)
        assert created
        assert [e["to_state"] for e in store.events("old-00000")] == ["PENDING", "QUEUED"]
    finally:
        new.dispose()
