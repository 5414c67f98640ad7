"""Caller SQL on SQLite, isolated by SQLite itself.

Each query gets its own connection that opens the database file read-only (``mode=ro``), defines the
four views as TEMP views filtered by the caller's id, then installs an authorizer
(``sqlite3.Connection.set_authorizer``) that allows only SELECT, recursive CTEs, the functions in
``functions.SQLITE_FUNCTIONS`` and these reads: columns of the TEMP views, of CTEs and subqueries,
and of the application's tables when the read is done *by the inner filtered views*. Reading a
table directly (``main.traces``, ``sqlite_master``), writing, ``ATTACH``, ``PRAGMA`` and every other
action are denied. A progress handler interrupts the query at the timeout; Python's ``execute``
refuses more than one statement.

SQLite tells the authorizer which view (or CTE: it cannot tell them apart) does each read. So the
views a query names (``traces``) read from inner views whose names carry a random token made for this
one connection (``traces_<token>``), and only those may read the application's tables: a CTE named
``traces`` that reads ``main.traces`` is denied, and a query cannot name a token it never saw.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa

from stash_pipeline.store.readonly_sql.errors import SqlRefused, SqlUnavailable
from stash_pipeline.store.readonly_sql.functions import SQLITE_FUNCTIONS
from stash_pipeline.store.readonly_sql.views import VIEW_NAMES, compile_select, view_selects

_PROGRESS_STEPS = 1000  # SQLite VM instructions between clock checks


def run(engine: sa.Engine, owner: str, sql: str, *, max_rows: int,
        timeout_s: float) -> tuple[list[str], list[tuple[Any, ...]]]:
    path = engine.url.database
    if not path or path == ":memory:":
        raise SqlUnavailable("the SQL endpoint needs a database file, not an in-memory database")
    connection = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True,
                                 check_same_thread=False)
    try:
        inner = _define_views(connection, engine.dialect, owner)
        connection.set_authorizer(_authorizer(inner))
        deadline = time.monotonic() + timeout_s
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline),
                                        _PROGRESS_STEPS)
        try:
            cursor = connection.execute(sql)
            columns = [d[0] for d in cursor.description or ()]
            rows = cursor.fetchmany(max_rows + 1)
        except sqlite3.OperationalError as error:
            if str(error) == "interrupted":
                raise SqlRefused(f"the query ran past the {timeout_s:g} s statement timeout",
                                 code="timeout") from None
            raise _refusal(error) from None
        except (sqlite3.DatabaseError, sqlite3.ProgrammingError, sqlite3.Warning) as error:
            raise _refusal(error) from None
    finally:
        connection.close()
    return columns, rows


def _refusal(error: Exception) -> SqlRefused:
    message = str(error)
    if "not authorized" in message or "prohibited" in message:
        return SqlRefused(f"{message}: a query reads only {', '.join(VIEW_NAMES)} with "
                          "ordinary functions", code="refused")
    if "one statement at a time" in message:
        return SqlRefused("send exactly one statement", code="refused")
    return SqlRefused(message, code="invalid")


def _define_views(connection: sqlite3.Connection, dialect: sa.Dialect, owner: str) -> set[str]:
    """Create the views; returns the names of the inner ones, the only readers of ``main``."""
    token = secrets.token_hex(16)
    main = sa.MetaData()
    selects = view_selects(sa.literal(owner), lambda t: t.to_metadata(main, schema="main"))
    inner = set()
    for name, select in selects.items():
        hidden = f"{name}_{token}"
        connection.execute(f'CREATE TEMP VIEW "{hidden}" AS {compile_select(select, dialect)}')
        connection.execute(f'CREATE TEMP VIEW {name} AS SELECT * FROM "{hidden}"')
        inner.add(hidden)
    return inner


def _authorizer(inner: set[str]) -> Callable[..., int]:
    temp_views = set(VIEW_NAMES) | inner

    def authorize(action: int, first: str | None, second: str | None, database: str | None,
                  source: str | None) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            allowed = (database is None  # a CTE or a subquery
                       or (database == "temp" and first in temp_views)
                       or (database == "main" and source in inner))
            return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_OK if (second or "").lower() in SQLITE_FUNCTIONS \
                else sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_DENY

    return authorize
