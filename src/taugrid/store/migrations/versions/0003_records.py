"""Records and restarts: experiment, code and Python environment of a run, its latest
metrics, automatic restarts; the failure class and resume point of each attempt.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

_RUN_COLUMNS = (
    "experiment_name",
    "experiment",
    "code_info",
    "python_env",
    "rerun_of",
    "metrics_last",
    "restarts",
    "next_attempt_at",
)
_ATTEMPT_COLUMNS = ("reason", "failure_class", "message", "resumed_from")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("experiment_name", sa.String(253), nullable=True))
        batch.add_column(sa.Column("experiment", sa.JSON, nullable=True))
        batch.add_column(sa.Column("code_info", sa.JSON, nullable=True))
        batch.add_column(sa.Column("python_env", sa.JSON, nullable=True))
        batch.add_column(sa.Column("rerun_of", sa.String(63), nullable=True))
        batch.add_column(sa.Column("metrics_last", sa.JSON, nullable=True))
        batch.add_column(sa.Column("restarts", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("next_attempt_at", sa.Float, nullable=True))
    op.create_index("ix_runs_experiment", "runs", ["experiment_name", "created_at"])
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("reason", sa.String(32), nullable=True))
        batch.add_column(sa.Column("failure_class", sa.String(16), nullable=True))
        batch.add_column(sa.Column("message", sa.Text, nullable=True))
        batch.add_column(sa.Column("resumed_from", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        for col in reversed(_ATTEMPT_COLUMNS):
            batch.drop_column(col)
    op.drop_index("ix_runs_experiment", "runs")
    with op.batch_alter_table("runs") as batch:
        for col in reversed(_RUN_COLUMNS):
            batch.drop_column(col)
