"""GPU health: the GPUs out of service and why (``gpu_health``), and every health event
with the decision taken and what came of it (``health_events``, append-only: the audit
trail of the monitor).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.create_table(
        "gpu_health",
        sa.Column("gpu", sa.String(128), primary_key=True),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("gpu_index", sa.Integer, nullable=True),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("fault_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("updated_by", sa.String(63), nullable=False),
    )
    op.create_table(
        "health_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("recorded_at", sa.Float, nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("gpu", sa.String(128), nullable=True),
        sa.Column("gpu_index", sa.Integer, nullable=True),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("xid", sa.Integer, nullable=True),
        sa.Column("level", sa.Integer, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("runs", sa.JSON, nullable=True),
    )
    op.create_index("ix_health_events_at", "health_events", ["at"])


def downgrade() -> None:
    op.drop_index("ix_health_events_at", table_name="health_events")
    op.drop_table("health_events")
    op.drop_table("gpu_health")
