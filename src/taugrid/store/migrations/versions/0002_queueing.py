"""Queueing: a run's cluster queue, priority, requests and flavor; applied policies.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("cluster_queue", sa.String(63), nullable=True))
        batch.add_column(
            sa.Column("priority_value", sa.Integer, nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("requests", sa.JSON, nullable=True))
        batch.add_column(sa.Column("gpu_type", sa.String(63), nullable=True))
        batch.add_column(sa.Column("flavor", sa.String(63), nullable=True))
        batch.add_column(sa.Column("preempt_requested_at", sa.Float, nullable=True))
    op.create_index("ix_runs_queued_seq", "runs", ["queued_seq"])
    op.create_table(
        "policies",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("applied_at", sa.Float, nullable=False),
        sa.Column("applied_by", sa.String(255), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("policies")
    op.drop_index("ix_runs_queued_seq", "runs")
    with op.batch_alter_table("runs") as batch:
        for col in (
            "preempt_requested_at",
            "flavor",
            "gpu_type",
            "requests",
            "priority_value",
            "cluster_queue",
        ):
            batch.drop_column(col)
