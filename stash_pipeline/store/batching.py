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


def insert_ignoring_duplicates(connection: sa.Connection, table: sa.Table) -> sa.Insert:
    """``INSERT ... ON CONFLICT DO NOTHING`` on the table's primary key, in either dialect."""
    if connection.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table).on_conflict_do_nothing()


def insert_rows(connection: sa.Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert rows that all have the same keys; on PostgreSQL through COPY.

    COPY streams the rows in one statement: about 2x faster than psycopg's pipelined executemany
    on tau2-bench traces (benchmarks/import_throughput.py). Elsewhere: executemany.
    """
    if not rows:
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
