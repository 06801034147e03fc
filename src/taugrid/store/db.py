"""Engine creation and migrations.

SQLite runs in WAL mode with ``synchronous=FULL``: every commit is fsynced before the
API acknowledges a change (``NORMAL`` would be ~15x faster but can lose the last
transactions on power loss, which breaks "durable before acknowledged").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def default_sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'tau.db'}"


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def connect(url: str, *, migrate: bool = True) -> Engine:
    """Create an engine for ``url`` and bring its schema to the newest migration."""
    if url.startswith("sqlite"):
        engine = create_engine(url, pool_size=8, max_overflow=16, pool_timeout=60)
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
    if migrate:
        upgrade(engine)
    return engine


def upgrade(engine: Engine) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


_WRITE_LOCKS: dict[int, threading.Lock] = {}


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A write transaction, committed (and fsynced) on exit.

    SQLite has one writer at a time; concurrent writers that collide wait in its busy
    handler, which sleeps in growing steps (1, 2, 5, 10 ms...) and cut API throughput to
    a fraction. Queueing writers on an in-process lock instead hands the database over
    the moment it is free. PostgreSQL handles concurrent writers itself.
    """
    if engine.dialect.name != "sqlite":
        with engine.begin() as conn:
            yield conn
        return
    lock = _WRITE_LOCKS.setdefault(id(engine), threading.Lock())
    with lock, engine.begin() as conn:
        yield conn
