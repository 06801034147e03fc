"""Identity and access: users, API tokens (salted hashes), workspaces, memberships, and
the append-only audit log.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("user", sa.String(63), sa.ForeignKey("users.name"), nullable=False),
        sa.Column("name", sa.String(63), nullable=True),
        sa.Column("salt", sa.String(32), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("revoked_at", sa.Float, nullable=True),
        sa.Column("last_used_at", sa.Float, nullable=True),
    )
    op.create_index("ix_tokens_user", "tokens", ["user"])
    op.create_table(
        "workspaces",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "memberships",
        sa.Column(
            "workspace",
            sa.String(63),
            sa.ForeignKey("workspaces.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("user", sa.String(63), sa.ForeignKey("users.name"), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(63), nullable=False),
        sa.Column("action", sa.String(63), nullable=False),
        sa.Column("target", sa.Text, nullable=True),
        sa.Column("workspace", sa.String(63), nullable=True),
        sa.Column("source", sa.String(255), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
    )
    op.create_index("ix_audit_at", "audit", ["at"])


def downgrade() -> None:
    op.drop_index("ix_audit_at", "audit")
    op.drop_table("audit")
    op.drop_table("memberships")
    op.drop_table("workspaces")
    op.drop_index("ix_tokens_user", "tokens")
    op.drop_table("tokens")
    op.drop_table("users")
