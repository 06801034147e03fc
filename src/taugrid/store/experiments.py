"""The experiments that runs name, summarised in one grouped read."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from taugrid.store.runs import Row
from taugrid.store.tables import runs


def experiment_summaries(
    engine: Engine, visible: frozenset[str] | None, limit: int = 500
) -> list[Row]:
    """``name``, ``runs`` and the newest run's ``last_at`` per experiment, newest first,
    counting only the runs of ``visible`` workspaces (None: all)."""
    q = (
        select(
            runs.c.experiment_name.label("name"),
            func.count().label("runs"),
            func.max(runs.c.created_at).label("last_at"),
        )
        .where(runs.c.experiment_name.is_not(None))
        .group_by(runs.c.experiment_name)
        .order_by(func.max(runs.c.created_at).desc())
        .limit(limit)
    )
    if visible is not None:
        q = q.where(runs.c.workspace.in_(sorted(visible)))
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]
