from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from stash_pipeline.store import Store, schema
from stash_pipeline.store.engine import MIGRATIONS, alembic_config, current_revision


def head_revision(store: Store) -> str:
    with store.transaction() as connection:
        return ScriptDirectory.from_config(alembic_config(connection)).get_current_head()


def test_migrate_is_idempotent_and_reaches_head(store: Store) -> None:
    store.migrate()
    store.migrate()
    assert current_revision(store.engine) == head_revision(store)


def test_migrations_create_exactly_the_schema_the_code_uses(store: Store) -> None:
    with store.transaction() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, schema.metadata) == []


def test_migrations_ship_inside_the_package() -> None:
    assert (MIGRATIONS / "env.py").is_file()
    assert (MIGRATIONS / "script.py.mako").is_file()
    assert sorted(p.name for p in (MIGRATIONS / "versions").glob("*.py"))


def test_a_fresh_sqlite_file_migrates(tmp_path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'new.db'}")
    with pytest.raises(Exception):
        store.trace_ids()  # no schema before migrate
    store.migrate()
    assert store.trace_ids() == []


@pytest.mark.postgres
def test_large_json_is_lz4_compressed_on_postgresql(postgres_store: Store) -> None:
    with postgres_store.transaction() as connection:
        has_lz4 = connection.scalar(sa.text(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
            "WHERE name = 'default_toast_compression'"))
        methods = dict(connection.execute(sa.text(
            "SELECT attname, attcompression FROM pg_attribute "
            "WHERE attrelid = 'traces'::regclass AND attname IN ('messages', 'tools')")).all())
    assert methods == ({"messages": "l", "tools": ""} if has_lz4 else {"messages": "", "tools": ""})
