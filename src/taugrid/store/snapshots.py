"""Which workspaces each code snapshot was uploaded for.

Snapshot files are content-addressed and stored once; this table is what makes a digest
exist for a workspace. A caller learns whether the server has a digest only for the
workspaces it can read, and a run may use a snapshot only in a workspace it was uploaded
for, so neither existence nor code crosses workspaces.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from taugrid.store.db import write_transaction
from taugrid.store.tables import snapshot_workspaces as sw


class SnapshotRecords:
    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    def record(self, digest: str, workspace: str, user: str) -> None:
        """Durably note that ``user`` uploaded ``digest`` for ``workspace``; the first
        upload is the one kept."""
        if self.uploaded_for(digest, workspace):
            return
        try:
            with write_transaction(self.engine) as conn:
                conn.execute(
                    insert(sw).values(
                        digest=digest,
                        workspace=workspace,
                        uploaded_by=user,
                        uploaded_at=self.clock(),
                    )
                )
        except IntegrityError:
            pass  # a concurrent upload of the same bytes recorded it first

    def uploaded_for(self, digest: str, workspace: str) -> bool:
        q = select(sw.c.digest).where(sw.c.digest == digest, sw.c.workspace == workspace)
        with self.engine.connect() as conn:
            return conn.execute(q).first() is not None
