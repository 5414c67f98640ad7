"""Database URLs, engines, transactions and migrations."""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from stash_pipeline.core.errors import InputError
from stash_pipeline.core.home import stash_home
from stash_pipeline.store.locks import lock_migrations
from stash_pipeline.store.migration_scripts import share_revision_maps

MIGRATIONS = Path(__file__).parent / "migrations"
# How long a SQLite writer waits for another one to finish before giving up: as long as a person
# waits for a command, since a large import holds the write lock for its whole transaction.
SQLITE_BUSY_TIMEOUT_ENV = "STASH_SQLITE_BUSY_TIMEOUT_S"
DEFAULT_SQLITE_BUSY_TIMEOUT_S = 600.0
# Execution option of read-only transactions: on SQLite they begin without taking the write lock.
READ_ONLY = "stash_read_only"


def database_url_from_env() -> str:
    """``DATABASE_URL``, else a SQLite file under ``STASH_HOME`` (default ``./.stash``), created."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return normalize_url(url)
    home = stash_home(os.environ)
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'stash.db'}"


def normalize_url(url: str) -> str:
    """Send bare PostgreSQL URLs to psycopg 3, the driver this project installs."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def sqlite_busy_timeout_s() -> float:
    raw = os.environ.get(SQLITE_BUSY_TIMEOUT_ENV)
    if not raw:
        return DEFAULT_SQLITE_BUSY_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise InputError(f"{SQLITE_BUSY_TIMEOUT_ENV} must be a number of seconds, got {raw!r}",
                         field=SQLITE_BUSY_TIMEOUT_ENV)
    return value


def create_engine(url: str) -> sa.Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        # pysqlite's timeout is SQLite's busy timeout: how long a statement waits for a lock.
        engine = sa.create_engine(url, connect_args={"timeout": sqlite_busy_timeout_s()})

        @sa.event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_connection, _record) -> None:
            # Let SQLAlchemy's "begin" below start transactions, not pysqlite: pysqlite begins
            # only at the first INSERT, so a transaction's earlier reads ran outside it and two
            # reimports both read version N and both wrote N + 1.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            # WAL lets the Dagster webserver read while an import writes.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        @sa.event.listens_for(engine, "begin")
        def _sqlite_begin(connection: sa.Connection) -> None:
            # A writer takes the write lock at its first statement (waiting up to the busy
            # timeout), so what it reads stays true until it commits; readers take no lock.
            read_only = connection.get_execution_options().get(READ_ONLY, False)
            connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


def alembic_config(connection: sa.Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def migrate(engine: sa.Engine, revision: str = "head") -> None:
    """Upgrade the schema to ``revision``; a no-op when it is already there.

    Every command calls this first, so it must be cheap and safe when many start at once: a read
    finds the schema at head without taking any lock; otherwise the upgrade runs under the
    migration lock (on SQLite, the write lock), and alembic reads the version again inside it, so
    the commands that waited find the work done.
    """
    if revision == "head" and current_revision(engine) == head_revision():
        return
    with engine.begin() as connection:
        lock_migrations(connection)
        command.upgrade(alembic_config(connection), revision)


def head_revision() -> str | None:
    share_revision_maps()  # the scripts are read once a process (migration_scripts.py)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config).get_current_head()


def current_revision(engine: sa.Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect().execution_options(**{READ_ONLY: True}) as connection:
        return MigrationContext.configure(connection).get_current_revision()
