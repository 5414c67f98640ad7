"""Database URLs, engines and migrations."""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from stash_pipeline.core.home import stash_home

MIGRATIONS = Path(__file__).parent / "migrations"


def database_url_from_env() -> str:
    """``DATABASE_URL``, else a SQLite file under ``STASH_HOME`` (default ``./.stash``), created."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return normalize_url(url)
    home = stash_home(os.environ)
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home.resolve() / 'stash.db'}"


def normalize_url(url: str) -> str:
    """Send bare PostgreSQL URLs to psycopg 3, the driver this project installs."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def create_engine(url: str) -> sa.Engine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = sa.create_engine(url)

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # noqa: ANN001
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            # WAL lets the Dagster webserver read while an import writes.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


def alembic_config(connection: sa.Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def migrate(engine: sa.Engine, revision: str = "head") -> None:
    """Upgrade the schema to ``revision``; a no-op when it is already there."""
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), revision)


def current_revision(engine: sa.Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
