"""Alembic environment: always run online on the connection the caller passes in."""

from alembic import context

from taugrid.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
