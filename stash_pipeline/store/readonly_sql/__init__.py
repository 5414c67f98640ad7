"""The SQL endpoint's engine: one read-only SELECT over the caller's own rows, on either database.

``ReadonlySql(store).prepare()`` once at start-up, then ``run(owner, sql, max_rows, timeout_s)``.
The caller sees five views, ``traces``, ``scores``, ``action_scores``, ``reward_models`` and
``trust_figures`` (``views.py``), of its own rows only; how each database enforces that is in
``postgres.py`` and ``sqlite.py``. At most ``concurrency`` queries run at once (counting a
PostgreSQL query whose caller was answered at the timeout but whose backend has not ended yet); a
query that waits for a slot longer than its timeout raises SqlBusy.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from stash_pipeline.store.readonly_sql.errors import SqlBusy, SqlRefused, SqlUnavailable
from stash_pipeline.store.readonly_sql.views import VIEW_NAMES

if TYPE_CHECKING:
    from stash_pipeline.store import Store

__all__ = ["ReadonlySql", "SqlBusy", "SqlRefused", "SqlResult", "SqlUnavailable", "VIEW_NAMES"]


@dataclass(frozen=True)
class SqlResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # the query had more rows than the limit


class ReadonlySql:
    def __init__(self, store: Store, *, concurrency: int = 4):
        self.store = store
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        self._count_lock = threading.Lock()
        self._running = 0
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
                                                pool_pre_ping=True,
                                                pool_size=self.concurrency)
        else:
            self._problem = None
        return self._problem

    def run(self, owner: str, sql: str, *, max_rows: int, timeout_s: float) -> SqlResult:
        if self._problem is not None:
            raise SqlUnavailable(self._problem)
        if not self._slots.acquire(timeout=timeout_s):
            raise SqlBusy(f"all {self.concurrency} SQL query slots stayed busy for "
                          f"{timeout_s:g} s; try again in a few seconds")
        with self._count_lock:
            self._running += 1
        release = _once(self._release)
        if self.postgres:
            from stash_pipeline.store.readonly_sql import postgres
            # It calls release() once the backend is done, which may be after it answers.
            columns, rows = postgres.run(self.store.engine, self._reader, owner, sql,
                                         max_rows=max_rows, timeout_s=timeout_s, release=release)
        else:
            from stash_pipeline.store.readonly_sql import sqlite
            try:
                columns, rows = sqlite.run(self.store.engine, owner, sql, max_rows=max_rows,
                                           timeout_s=timeout_s)
            finally:
                release()
        return SqlResult(columns, rows[:max_rows], truncated=len(rows) > max_rows)

    @property
    def running(self) -> int:
        """Queries holding a slot now (a PostgreSQL backend past its timeout included)."""
        return self._running

    def _release(self) -> None:
        with self._count_lock:
            self._running -= 1
        self._slots.release()

    def dispose(self) -> None:
        if self._reader is not None:
            self._reader.dispose()


def _once(function):
    lock, done = threading.Lock(), []

    def call() -> None:
        with lock:
            if done:
                return
            done.append(True)
        function()

    return call
