"""Stop reasons carried end to end: the stop the control plane asked for, and how each
attempt was stopped.

- ``runs.preempt_requested_at`` becomes ``runs.stop_requested_at``: any stop the control
  plane asks for (preemption, hardware fault, drain, eviction), not only preemption;
  ``stop_reason``, ``stop_message`` and ``stop_fault_at`` say which, in words, and when
  the fault happened. A person's cancel stays ``cancel_requested_at`` (it wins).
- ``attempts.stop_reason`` and ``attempts.fault_at``: how the attempt was stopped, and for
  a hardware stop when the fault happened (the next attempt resumes from a checkpoint
  written before it).

Plain ``ALTER TABLE`` (SQLite 3.25+ and PostgreSQL rename a column in place): no table
rebuild, so no cascade to events and attempts (see 0005).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.execute("ALTER TABLE runs RENAME COLUMN preempt_requested_at TO stop_requested_at")
    op.add_column("runs", sa.Column("stop_reason", sa.String(16), nullable=True))
    op.add_column("runs", sa.Column("stop_message", sa.Text, nullable=True))
    op.add_column("runs", sa.Column("stop_fault_at", sa.Float, nullable=True))
    op.add_column("attempts", sa.Column("stop_reason", sa.String(16), nullable=True))
    op.add_column("attempts", sa.Column("fault_at", sa.Float, nullable=True))
    # A preemption recorded by an older server keeps its meaning.
    op.execute("UPDATE runs SET stop_reason = 'preempt' WHERE stop_requested_at IS NOT NULL")


def downgrade() -> None:
    op.drop_column("attempts", "fault_at")
    op.drop_column("attempts", "stop_reason")
    op.drop_column("runs", "stop_fault_at")
    op.drop_column("runs", "stop_message")
    op.drop_column("runs", "stop_reason")
    op.execute("ALTER TABLE runs RENAME COLUMN stop_requested_at TO preempt_requested_at")
