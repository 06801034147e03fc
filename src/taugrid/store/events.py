"""The ordered event feed: every run's events by id, for callers that follow what
happens (the portal's live view, ``tau watch``) without asking per run.

An event's id is its place in the feed, so a follower that has seen id N asks for the
events after N and never misses one. That holds only if ids become visible in the order
they are handed out: SQLite has one writer at a time; on PostgreSQL a transaction that
took id 10 may commit after one that took id 11, so every transaction that writes events
takes one transaction-scoped advisory lock first (``insert_events``), and ids commit in
order. The lock is held only by the transactions that write events, to their commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, text

from taugrid.store.tables import events, runs

_INSERT_EVENT = insert(events)
_ORDER_LOCK = text("SELECT pg_advisory_xact_lock(74017)")  # any constant, the same everywhere


def insert_events(conn: Connection, rows: Sequence[dict[str, Any]] | dict[str, Any]) -> None:
    """Insert events in the transaction of ``conn``, in feed order (see the module)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_ORDER_LOCK)
    conn.execute(_INSERT_EVENT, rows)


class EventFeed:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def head(self) -> int:
        """The id of the newest event (0 when none): where a feed that wants only what
        happens from now on starts."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.max(events.c.id))).scalar() or 0)

    def after(
        self, after_id: int, workspaces: frozenset[str] | None, limit: int
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` events with an id above ``after_id``, oldest first, of runs in
        ``workspaces`` (None: every workspace)."""
        q = (
            select(
                events.c.id,
                events.c.run_id,
                runs.c.workspace,
                events.c.at,
                events.c.from_state,
                events.c.to_state,
                events.c.reason,
                events.c.message,
            )
            .join(runs, runs.c.id == events.c.run_id)
            .where(events.c.id > after_id)
            .order_by(events.c.id)
            .limit(limit)
        )
        if workspaces is not None:
            q = q.where(runs.c.workspace.in_(sorted(workspaces)))
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]
