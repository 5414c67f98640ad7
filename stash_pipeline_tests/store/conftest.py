"""The store suite runs against SQLite (a file per test) and the real PostgreSQL server.

PostgreSQL gets a fresh database per test session (``stash_test_<random>``), dropped afterwards, so
parallel runs never meet; each test starts from empty tables.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from stash_pipeline.store import Store, schema

POSTGRES_SERVER = os.environ.get("STASH_TEST_POSTGRES",
                                 "postgresql+psycopg://postgres@127.0.0.1:5432")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    admin = sa.create_engine(f"{POSTGRES_SERVER}/postgres", isolation_level="AUTOCOMMIT")
    name = f"stash_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as error:
        pytest.fail(f"PostgreSQL at {POSTGRES_SERVER} is not reachable (start it, or deselect "
                    f"with -m 'not postgres'): {error}")
    try:
        yield f"{POSTGRES_SERVER}/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_store(postgres_url: str) -> Iterator[Store]:
    store = Store(postgres_url)
    store.migrate()
    yield store
    store.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Store]:
    if request.param == "sqlite":
        store = Store(f"sqlite:///{tmp_path / 'stash.db'}")
        store.migrate()
        yield store
        store.dispose()
        return
    store = request.getfixturevalue("postgres_store")
    with store.transaction() as connection:
        for table in reversed(schema.metadata.sorted_tables):
            connection.execute(table.delete())
    yield store
