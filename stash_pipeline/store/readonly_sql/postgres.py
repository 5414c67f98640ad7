"""Caller SQL on PostgreSQL, isolated by the database.

- **Who runs it**: a separate session logged in as ``stash_sql_reader``, a role that owns nothing
  and may only read the five views in schema ``stash_sql``. It is the session user, not a
  ``SET ROLE``: a query could undo ``SET ROLE`` with ``set_config('role', 'none', true)`` and read
  everything the application's role can (a test shows it), but it can never become another login.
- **Whose rows**: each view reads the application's tables as the view's owner and keeps the rows of
  the account in ``stash_sql.callers`` for the reading session's ``pg_backend_pid()``. The API
  writes that row through its own connection before the query and deletes it after; the reader can
  neither write it nor fake its own pid. No row: the views are empty. The rows are selected in a
  ``MATERIALIZED`` CTE (``views.caller_views``), which no condition of the query can enter: the
  query's expressions only ever see the caller's rows, so no error, value or time can tell about
  another account's (``security_barrier`` alone lets PostgreSQL run a condition it judges
  leak-proof on every row first).
- **What it may do**: a ``READ ONLY`` transaction with ``SET LOCAL statement_timeout``, always
  rolled back; rows are fetched from a server-side cursor, at most the row limit plus one.

``prepare`` creates the schema, the callers table, the views and the role (which needs CREATEROLE,
or an operator who creates ``stash_sql_reader`` beforehand) and grants; every API start runs it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from stash_pipeline.store import schema
from stash_pipeline.store.readonly_sql.errors import SqlRefused, SqlUnavailable, timed_out
from stash_pipeline.store.readonly_sql.gate import SCHEMA, check_select
from stash_pipeline.store.readonly_sql.views import VIEW_NAMES, caller_views, compile_select

READER_ROLE = "stash_sql_reader"
READER_URL_ENV = "STASH_SQL_DATABASE_URL"
KILL_GRACE_S = 0.5  # after the timeout, before the backend is terminated
_LOCK_KEY = 7_311_524_901  # pg_advisory_xact_lock: one API start at a time rebuilds the views

log = logging.getLogger(__name__)

callers = sa.Table(
    "callers", sa.MetaData(),
    sa.Column("pid", sa.Integer, primary_key=True),
    sa.Column("account", schema.ID, nullable=False),
    schema=SCHEMA,
)


def reader_url(app_url: str, environ: dict[str, str] | None = None) -> str:
    """``STASH_SQL_DATABASE_URL``, else the application's URL as ``stash_sql_reader`` without a
    password (trust or peer authentication; give the role a password and set the variable else)."""
    environ = dict(os.environ) if environ is None else environ
    explicit = environ.get(READER_URL_ENV)
    if explicit:
        from stash_pipeline.store.engine import normalize_url
        return normalize_url(explicit)
    url = sa.engine.make_url(app_url).set(username=READER_ROLE, password=None)
    return url.render_as_string(hide_password=False)


def prepare(engine: sa.Engine) -> str | None:
    """Create or refresh the views, the callers table, the role and its grants.

    Returns None when ready, else why caller SQL is unavailable (the endpoint answers 503 with it).
    """
    caller = (sa.select(callers.c.account)
              .where(callers.c.pid == sa.func.pg_backend_pid()).scalar_subquery())
    with engine.begin() as c:
        c.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        c.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
        callers.create(c, checkfirst=True)
        for name, select in caller_views(caller).items():
            c.execute(sa.text(f"DROP VIEW IF EXISTS {SCHEMA}.{name}"))
            c.execute(sa.text(f"CREATE VIEW {SCHEMA}.{name} WITH (security_barrier) AS "
                              f"{compile_select(select, c.dialect)}"))
        problem = _ensure_role(c)
        if problem:
            return problem
        database = c.dialect.identifier_preparer.quote(
            c.scalar(sa.text("SELECT current_database()")))
        c.execute(sa.text(f"GRANT CONNECT ON DATABASE {database} TO {READER_ROLE}"))
        c.execute(sa.text(f"GRANT USAGE ON SCHEMA {SCHEMA} TO {READER_ROLE}"))
        views = ", ".join(f"{SCHEMA}.{name}" for name in VIEW_NAMES)
        c.execute(sa.text(f"GRANT SELECT ON {views} TO {READER_ROLE}"))
    return None


def _ensure_role(c: sa.Connection) -> str | None:
    if c.scalar(sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": READER_ROLE}):
        return None
    savepoint = c.begin_nested()
    try:
        # NOINHERIT and no memberships: the role has only what is granted to it (and PUBLIC).
        c.execute(sa.text(f"CREATE ROLE {READER_ROLE} LOGIN NOINHERIT"))
        savepoint.commit()
    except sa.exc.DBAPIError as error:
        savepoint.rollback()
        # Another database's API start may have created it meanwhile (the role is cluster-wide).
        if getattr(error.orig, "sqlstate", None) in ("42710", "23505"):
            return None
        return (f"the SQL endpoint needs the login role {READER_ROLE}, which this database user "
                f"may not create ({error.orig}); create it (CREATE ROLE {READER_ROLE} LOGIN "
                f"PASSWORD '...') and set {READER_URL_ENV} to a URL that logs in as it")
    return None


def run(app: sa.Engine, reader: sa.Engine, owner: str, sql: str, *, max_rows: int,
        timeout_s: float, release: Callable[[], None] = lambda: None,
        ) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(column names, at most ``max_rows + 1`` rows) of one caller query.

    The query runs in a thread of its own; its caller is answered at the statement timeout even
    when PostgreSQL is slow to act on it (LIKE and strpos check for interrupts only between calls,
    so one call on long strings can outlast the timeout): the backend is then terminated, and
    ``release`` is called once it has ended, not before."""
    try:
        check_select(sql)
        connection, raw, pid = _reader_session(reader)
    except BaseException:
        release()
        raise
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            _set_caller(app, pid, owner)
            outcome["rows"] = _query(raw, sql, max_rows=max_rows, timeout_s=timeout_s)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error
        finally:
            _end_session(app, connection, raw, pid)
            done.set()
            release()

    threading.Thread(target=work, name="stash-sql-query", daemon=True).start()
    if not done.wait(timeout_s + KILL_GRACE_S):
        _terminate(app, pid)
        raise timed_out(timeout_s)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["rows"]


def _reader_session(reader: sa.Engine) -> tuple[sa.Connection, Any, int]:
    try:
        connection = reader.connect()
    except sa.exc.OperationalError as error:
        raise SqlUnavailable(f"cannot log in as {READER_ROLE}: {error.orig}; set "
                             f"{READER_URL_ENV}") from None
    raw = connection.connection.driver_connection
    with raw.cursor() as cursor:
        pid = cursor.execute("SELECT pg_backend_pid()").fetchone()[0]
    raw.rollback()
    return connection, raw, pid


def _query(raw: Any, sql: str, *, max_rows: int,
           timeout_s: float) -> tuple[list[str], list[tuple[Any, ...]]]:
    import psycopg

    try:
        with raw.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
            cursor.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
            cursor.execute(f"SET LOCAL search_path = {SCHEMA}")
        with raw.cursor(name="stash_sql_query") as cursor:
            cursor.execute(sql)
            columns = [column.name for column in cursor.description or ()]
            rows = cursor.fetchmany(max_rows + 1)
    except psycopg.errors.QueryCanceled:
        raise timed_out(timeout_s) from None
    except psycopg.errors.AdminShutdown:  # terminated by _terminate: its caller has its answer
        raise timed_out(timeout_s) from None
    except psycopg.Error as error:
        message = error.diag.message_primary or str(error)
        raise SqlRefused(message, code="invalid") from None
    return columns, [tuple(row) for row in rows]


def _end_session(app: sa.Engine, connection: sa.Connection, raw: Any, pid: int) -> None:
    try:
        raw.rollback()
    except Exception:  # noqa: BLE001 - a terminated backend: the connection is gone
        connection.invalidate()
    finally:
        _clear_caller(app, pid)
        connection.close()


def _terminate(app: sa.Engine, pid: int) -> None:
    """End a reader backend that outlived its timeout (it acts on it at its next interrupt
    check); the application's role may signal the reader's backends (pg_signal_backend or
    superuser), else the backend ends on its own when its call returns."""
    try:
        with app.begin() as c:
            c.execute(sa.text("SELECT pg_cancel_backend(:pid), pg_terminate_backend(:pid)"),
                      {"pid": pid})
    except sa.exc.DBAPIError as error:
        log.warning("could not stop the SQL reader backend %s: %s", pid, error.orig)


def _set_caller(app: sa.Engine, pid: int, owner: str) -> None:
    from sqlalchemy.dialects.postgresql import insert

    statement = insert(callers).values(pid=pid, account=owner)
    with app.begin() as c:
        c.execute(statement.on_conflict_do_update(index_elements=[callers.c.pid],
                                                  set_={"account": owner}))


def _clear_caller(app: sa.Engine, pid: int) -> None:
    with app.begin() as c:
        c.execute(callers.delete().where(callers.c.pid == pid))
