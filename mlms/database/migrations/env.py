"""Alembic's environment: migrations run on the connection ``mlms.database.connect`` hands over
(``config.attributes["connection"]``), never from an ini file."""

from __future__ import annotations

from alembic import context

from mlms.database.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    # SQLite cannot ALTER most things in place: batch mode copies the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
