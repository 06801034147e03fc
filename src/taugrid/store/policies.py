"""Applied platform policies: every apply is kept; the newest is in force."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, insert, select

from taugrid.store.db import write_transaction
from taugrid.store.tables import policies

Row = dict[str, Any]


class PolicyStore:
    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    def current(self) -> Row | None:
        q = select(policies).order_by(policies.c.id.desc()).limit(1)
        with self.engine.connect() as conn:
            r = conn.execute(q).mappings().first()
        return dict(r) if r else None

    def apply(self, source: str, text: str, digest: str, applied_by: str) -> Row:
        values = {
            "source": source,
            "text": text,
            "hash": digest,
            "applied_at": self.clock(),
            "applied_by": applied_by,
        }
        with write_transaction(self.engine) as conn:
            conn.execute(insert(policies).values(**values))
        row = self.current()
        assert row is not None
        return row
