"""Alembic environment: slotward passes the connection in; there is no alembic.ini."""

from __future__ import annotations

from alembic import context

from slotward.adapters.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
