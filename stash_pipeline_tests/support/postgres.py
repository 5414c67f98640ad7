"""A scratch PostgreSQL database for a test session or a module: created empty, dropped afterwards
even while connections to it are still open."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

POSTGRES_SERVER = os.environ.get("STASH_TEST_POSTGRES",
                                 "postgresql+psycopg://postgres@127.0.0.1:5432")


@contextmanager
def scratch_database(prefix: str, server: str = POSTGRES_SERVER) -> Iterator[str]:
    """The URL of a new database named ``<prefix>_<random>`` on ``server``; a server that cannot
    be reached raises ``sqlalchemy.exc.OperationalError`` before anything is created."""
    admin = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except BaseException:
        admin.dispose()
        raise
    try:
        yield f"{server}/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
