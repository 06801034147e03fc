"""GPU health records: the GPUs out of service (``gpu_health``) and the health events with
what was decided and done (``health_events``, append-only).

A quarantine is written before anything acts on it (the runs on that GPU are stopped
after the commit), so a restarted server keeps every GPU out that was out, and the
scheduler, which reads the device inventory filled from here, places nothing on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection, Engine, insert, select, update

from taugrid.store.db import write_transaction
from taugrid.store.tables import gpu_health, health_events

Row = dict[str, Any]
QUARANTINED = "quarantined"
RETURNED = "returned"


class HealthStore:
    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    # -- what is out of service ---------------------------------------------------------
    def take_out(
        self,
        gpus: list[tuple[str, int | None]],
        *,
        node: str,
        level: int,
        reason: str,
        fault_at: float,
        event: Mapping[str, Any],
    ) -> int:
        """Put each (uuid, index) out of service (one already out keeps its first fault
        time and takes the worse level) and record the event, in one commit; its id."""
        now = self.clock()
        with write_transaction(self.engine) as conn:
            for gpu, index in gpus:
                had = (
                    conn.execute(select(gpu_health).where(gpu_health.c.gpu == gpu))
                    .mappings()
                    .first()
                )
                if had is not None and had["state"] == QUARANTINED:
                    conn.execute(
                        update(gpu_health)
                        .where(gpu_health.c.gpu == gpu)
                        .values(level=max(level, had["level"]), updated_at=now)
                    )
                    continue
                values = {
                    "node": node,
                    "gpu_index": index,
                    "level": level,
                    "state": QUARANTINED,
                    "reason": reason,
                    "fault_at": fault_at,
                    "updated_at": now,
                    "updated_by": "monitor",
                }
                if had is None:
                    conn.execute(insert(gpu_health).values(gpu=gpu, **values))
                else:
                    conn.execute(update(gpu_health).where(gpu_health.c.gpu == gpu).values(**values))
            return _insert_event(conn, now, event)

    def release(self, gpu: str, by: str, event: Mapping[str, Any]) -> bool:
        """Back into service after a human's decision; False when it was not out."""
        now = self.clock()
        with write_transaction(self.engine) as conn:
            done = conn.execute(
                update(gpu_health)
                .where(gpu_health.c.gpu == gpu, gpu_health.c.state == QUARANTINED)
                .values(state=RETURNED, updated_at=now, updated_by=by)
            ).rowcount
            if done:
                _insert_event(conn, now, event)
        return bool(done)

    def gpus(self) -> list[Row]:
        """Every GPU with a health record (quarantined or returned), by node and index."""
        q = select(gpu_health).order_by(gpu_health.c.node, gpu_health.c.gpu_index)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def quarantined(self) -> list[Row]:
        return [r for r in self.gpus() if r["state"] == QUARANTINED]

    # -- events ---------------------------------------------------------------------------
    def record(self, event: Mapping[str, Any]) -> int:
        with write_transaction(self.engine) as conn:
            return _insert_event(conn, self.clock(), event)

    def set_runs(self, event_id: int, runs: list[str]) -> None:
        """The runs stopped for an event (known once the quarantine is durable)."""
        with write_transaction(self.engine) as conn:
            conn.execute(
                update(health_events).where(health_events.c.id == event_id).values(runs=runs)
            )

    def events(
        self,
        *,
        since: float | None = None,
        min_level: int = 0,
        limit: int = 200,
        ids: list[int] | None = None,
    ) -> list[Row]:
        """Newest first; ``ids`` keeps only those events."""
        q = select(health_events).where(health_events.c.level >= min_level)
        if since is not None:
            q = q.where(health_events.c.at >= since)
        if ids is not None:
            q = q.where(health_events.c.id.in_(ids))
        q = q.order_by(health_events.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]


def _insert_event(conn: Connection, now: float, event: Mapping[str, Any]) -> int:
    key = conn.execute(insert(health_events).values(recorded_at=now, **event)).inserted_primary_key
    assert key is not None
    return int(key[0])
