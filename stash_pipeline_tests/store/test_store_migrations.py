from __future__ import annotations

import shutil

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


def test_each_migration_folder_is_read_once_a_process(tmp_path, monkeypatch) -> None:
    """share_revision_maps (on in every test process, as in the package's): a second
    ScriptDirectory of a folder reads none of its scripts, another folder reads its own."""
    from alembic.config import Config
    from alembic.script import Script

    from stash_pipeline.store.migration_scripts import share_revision_maps

    share_revision_maps()
    read: list[str] = []
    from_path = Script._from_path.__func__
    monkeypatch.setattr(Script, "_from_path", classmethod(
        lambda cls, scriptdir, path: read.append(str(path)) or from_path(cls, scriptdir, path)))
    scripts = len(list((MIGRATIONS / "versions").glob("*.py")))

    def head_of(folder) -> str:
        config = Config()
        config.set_main_option("script_location", str(folder))
        return ScriptDirectory.from_config(config).get_current_head()

    first, second = (shutil.copytree(MIGRATIONS, tmp_path / name) for name in ("a", "b"))
    heads = [head_of(first), head_of(first)]
    assert len(read) == scripts and heads[0] == heads[1] is not None
    assert head_of(second) == heads[0] and len(read) == 2 * scripts
