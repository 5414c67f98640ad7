"""The store every command works on: from the environment, migrated to the current schema."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stash_pipeline.store import Store


def open_store() -> Store:
    # Imported here: `--help` and argument errors should not pay for SQLAlchemy and alembic.
    from stash_pipeline.store import Store

    store = Store.from_env()
    store.migrate()
    return store
