"""Runs, their events and attempts.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(63), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("workspace", sa.String(63), nullable=False),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("priority", sa.String(63), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("submitter", sa.String(255), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=True, unique=True),
        sa.Column("spec_source", sa.Text, nullable=False),
        sa.Column("spec_file_text", sa.Text, nullable=True),
        sa.Column("spec_overrides", sa.JSON, nullable=False),
        sa.Column("spec_resolved", sa.JSON, nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("snapshot_digest", sa.String(64), nullable=False),
        sa.Column("env_summary", sa.JSON, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("queued_seq", sa.Integer, nullable=False),
        sa.Column("attempt_count", sa.Integer, nullable=False),
        sa.Column("cancel_requested_at", sa.Float, nullable=True),
    )
    op.create_index("ix_runs_created_at", "runs", ["created_at"])
    op.create_index("ix_runs_name_created", "runs", ["name", "created_at"])
    op.create_index("ix_runs_state", "runs", ["state"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "run_id", sa.String(63), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
    )
    op.create_index("ix_events_run_id", "events", ["run_id", "id"])
    op.create_table(
        "attempts",
        sa.Column(
            "run_id", sa.String(63), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("signal", sa.Integer, nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("placement", sa.JSON, nullable=False),
        sa.Column("attempt_dir", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("attempts")
    op.drop_table("events")
    op.drop_table("runs")
