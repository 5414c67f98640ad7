"""The SQL endpoint's engine: one read-only SELECT over the caller's own rows, on either database.

``ReadonlySql(store).prepare()`` once at start-up, then ``run(owner, sql, max_rows, timeout_s)``.
The caller sees four views, ``traces``, ``scores``, ``action_scores`` and ``reward_models``
(``views.py``), of its own rows only; how each database enforces that is in ``postgres.py`` and
``sqlite.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from stash_pipeline.store.readonly_sql.errors import SqlRefused, SqlUnavailable
from stash_pipeline.store.readonly_sql.views import VIEW_NAMES

if TYPE_CHECKING:
    from stash_pipeline.store import Store

__all__ = ["ReadonlySql", "SqlRefused", "SqlResult", "SqlUnavailable", "VIEW_NAMES"]


@dataclass(frozen=True)
class SqlResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # the query had more rows than the limit


class ReadonlySql:
    def __init__(self, store: Store):
        self.store = store
        self._reader: sa.Engine | None = None
        self._problem: str | None = "not prepared: call prepare() at start-up"

    @property
    def postgres(self) -> bool:
        return self.store.engine.dialect.name == "postgresql"

    def prepare(self) -> str | None:
        """Set up what the database needs; returns why the endpoint is unavailable, or None."""
        if self.postgres:
            from stash_pipeline.store.readonly_sql import postgres
            self._problem = postgres.prepare(self.store.engine)
            if self._problem is None and self._reader is None:
                self._reader = sa.create_engine(postgres.reader_url(self.store.url),
                                                pool_pre_ping=True, pool_size=4)
        else:
            self._problem = None
        return self._problem

    def run(self, owner: str, sql: str, *, max_rows: int, timeout_s: float) -> SqlResult:
        if self._problem is not None:
            raise SqlUnavailable(self._problem)
        if self.postgres:
            from stash_pipeline.store.readonly_sql import postgres
            columns, rows = postgres.run(self.store.engine, self._reader, owner, sql,
                                         max_rows=max_rows, timeout_s=timeout_s)
        else:
            from stash_pipeline.store.readonly_sql import sqlite
            columns, rows = sqlite.run(self.store.engine, owner, sql, max_rows=max_rows,
                                       timeout_s=timeout_s)
        return SqlResult(columns, rows[:max_rows], truncated=len(rows) > max_rows)

    def dispose(self) -> None:
        if self._reader is not None:
            self._reader.dispose()
