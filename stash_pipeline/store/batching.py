"""Statements over many rows: bounded IN lists and bulk inserts."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

T = TypeVar("T")
IN_LIST_SIZE = 1000  # PostgreSQL takes at most 65535 parameters a statement


def chunks(items: Sequence[T], size: int = IN_LIST_SIZE) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def dialect_insert(connection: sa.Connection, table: sa.Table) -> Any:
    """The dialect's INSERT of ``table``, which has ``ON CONFLICT`` (both dialects spell it the
    same: ``on_conflict_do_nothing``, ``on_conflict_do_update`` and ``excluded``)."""
    if connection.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def insert_ignoring_duplicates(connection: sa.Connection, table: sa.Table) -> sa.Insert:
    """``INSERT ... ON CONFLICT DO NOTHING`` on the table's primary key, in either dialect."""
    return dialect_insert(connection, table).on_conflict_do_nothing()


def insert_rows(connection: sa.Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert rows that all have the same keys; on PostgreSQL through COPY.

    COPY streams the rows in one statement: about 2x faster than psycopg's pipelined executemany
    on tau2-bench traces (benchmarks/import_throughput.py). SQLite: the driver's executemany of
    the rows as SQLAlchemy would bind them (``_sqlite_insert``).
    """
    if not rows:
        return
    if connection.dialect.name == "sqlite":
        _sqlite_insert(connection, table, rows)
        return
    if connection.dialect.name != "postgresql":
        connection.execute(table.insert(), rows)
        return
    columns = list(rows[0])
    as_json = [isinstance(table.c[name].type, sa.JSON) for name in columns]
    names = ", ".join(connection.dialect.identifier_preparer.quote(c) for c in columns)
    cursor = connection.connection.driver_connection.cursor()
    with cursor.copy(f"COPY {table.name} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([json.dumps(row[c]) if is_json else row[c]
                            for c, is_json in zip(columns, as_json)])


def _sqlite_insert(connection: sa.Connection, table: sa.Table,
                   rows: Sequence[dict[str, Any]]) -> None:
    """One executemany of the rows, each value bound by its column type's own processor (JSON
    text, SQLite's datetime form) and each missing column with a Python default (``created_at``)
    given it, row by row, as ``connection.execute(table.insert(), rows)`` does; without
    SQLAlchemy compiling and processing parameters row by row, which was a fifth of an import's
    time on SQLite (issue 22's profile)."""
    dialect = connection.dialect
    defaults = [c for c in table.c if c.name not in rows[0] and c.default is not None]
    for column in defaults:
        if not (column.default.is_callable or column.default.is_scalar):
            raise ValueError(f"{table.name}.{column.name}: a default this insert cannot give")
    columns = [table.c[name] for name in rows[0]] + defaults
    values = []  # column by column: map() binds a whole column at C speed
    for column in columns:
        if column.name in rows[0]:
            raw = [row[column.name] for row in rows]
        elif column.default.is_callable:
            raw = [column.default.arg(None) for _ in rows]
        else:
            raw = [column.default.arg] * len(rows)
        bind = column.type.dialect_impl(dialect).bind_processor(dialect)
        values.append(raw if bind is None else list(map(bind, raw)))
    quote = dialect.identifier_preparer.quote
    statement = (f"INSERT INTO {quote(table.name)} ({', '.join(quote(c.name) for c in columns)}) "
                 f"VALUES ({', '.join('?' * len(columns))})")
    connection.exec_driver_sql(statement, list(zip(*values)))
