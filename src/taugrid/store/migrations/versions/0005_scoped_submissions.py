"""Submissions one workspace cannot abuse: idempotency keys scoped to the caller and the
workspace and bound to a hash of the request; the workspaces each code snapshot was
uploaded for.

- ``runs.idempotency_key`` loses its global unique constraint; the unique index
  ``ux_runs_idempotency`` on (``idempotency_owner``, ``workspace``, ``idempotency_key``)
  replaces it. Existing keyed runs get their submitter as owner, and no request hash (a
  reused old key is answered with its run, as before).
- ``snapshot_workspaces`` starts with one row per (snapshot, workspace) that existing runs
  used, so ``tau rerun`` of an old run finds its snapshot; snapshot files no run refers to
  are recorded nowhere: the CLI uploads them again when it needs them.

SQLite cannot drop a constraint in place: the table is rebuilt (copy, drop, rename). The
store runs with ``PRAGMA foreign_keys=ON`` and a PRAGMA cannot change inside the
migration's transaction, so dropping ``runs`` would cascade to every event and attempt:
they are set aside in temporary tables and put back after the rebuild.

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

revision = "0005"
down_revision = "0004"

# 0001 left the unique constraint unnamed: SQLite's reflection then names it by this.
_NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}
_SQLITE_UNIQUE = "uq_runs_idempotency_key"
_CHILDREN = ("events", "attempts")  # ON DELETE CASCADE from runs


def upgrade() -> None:
    bind = op.get_bind()
    unique = _unique_name(bind)
    with _runs_rebuilt(bind) as batch:
        batch.add_column(sa.Column("idempotency_owner", sa.String(255), nullable=True))
        batch.add_column(sa.Column("request_hash", sa.String(64), nullable=True))
        if unique is not None:
            batch.drop_constraint(unique, type_="unique")
    op.execute("UPDATE runs SET idempotency_owner = submitter WHERE idempotency_key IS NOT NULL")
    op.create_index(
        "ux_runs_idempotency",
        "runs",
        ["idempotency_owner", "workspace", "idempotency_key"],
        unique=True,
    )
    op.create_table(
        "snapshot_workspaces",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("workspace", sa.String(63), primary_key=True),
        sa.Column("uploaded_by", sa.String(255), nullable=False),
        sa.Column("uploaded_at", sa.Float, nullable=False),
    )
    op.execute(
        "INSERT INTO snapshot_workspaces (digest, workspace, uploaded_by, uploaded_at) "
        "SELECT snapshot_digest, workspace, MIN(submitter), MIN(created_at) FROM runs "
        "GROUP BY snapshot_digest, workspace"
    )


def downgrade() -> None:
    """Fails (and changes nothing) when two workspaces or callers now share a key."""
    bind = op.get_bind()
    op.drop_table("snapshot_workspaces")
    op.drop_index("ux_runs_idempotency", "runs")
    with _runs_rebuilt(bind) as batch:
        batch.drop_column("request_hash")
        batch.drop_column("idempotency_owner")
        name = _SQLITE_UNIQUE if bind.dialect.name == "sqlite" else "runs_idempotency_key_key"
        batch.create_unique_constraint(name, ["idempotency_key"])


def _unique_name(bind: sa.Connection) -> str | None:
    """The name of the unique constraint on ``runs.idempotency_key`` alone."""
    if bind.dialect.name == "sqlite":
        return _SQLITE_UNIQUE
    for uc in sa.inspect(bind).get_unique_constraints("runs"):
        if uc["column_names"] == ["idempotency_key"]:
            return uc["name"]
    return None


@contextmanager
def _runs_rebuilt(bind: sa.Connection) -> Iterator[BatchOperations]:
    """``batch_alter_table("runs")`` that keeps the runs' events and attempts on SQLite."""
    sqlite = bind.dialect.name == "sqlite"
    if sqlite:
        for child in _CHILDREN:
            op.execute(f"CREATE TEMP TABLE _keep_{child} AS SELECT * FROM {child}")
    with op.batch_alter_table(
        "runs", recreate="always" if sqlite else "auto", naming_convention=_NAMING
    ) as batch:
        yield batch
    if sqlite:
        for child in _CHILDREN:
            # Empty after the cascade; emptied anyway in case foreign keys were off.
            op.execute(f"DELETE FROM {child}")
            op.execute(f"INSERT INTO {child} SELECT * FROM _keep_{child}")
            op.execute(f"DROP TABLE _keep_{child}")
