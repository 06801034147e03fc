"""Durable state: SQLAlchemy 2 Core tables, Alembic migrations, repositories."""

from taugrid.store.db import connect, default_sqlite_url
from taugrid.store.runs import RunStore

__all__ = ["RunStore", "connect", "default_sqlite_url"]
