"""Alembic environment: run by Store.migrate() with an open connection (no alembic.ini needed)."""

from __future__ import annotations

from alembic import context

from stash_pipeline.store.schema import metadata

config = context.config


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through Store.migrate(), which passes a connection")
    # render_as_batch: SQLite alters tables by copying them; PostgreSQL ignores it.
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True,
                      compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
