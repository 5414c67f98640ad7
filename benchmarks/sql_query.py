"""Latency of the SQL endpoint against the same queries over plain owner-filtered views.

The tau2-bench runs (../shared/data/tau2-bench/runs) are imported ``--copies`` times into a fresh
store, for the caller and as many times for another account (so the isolation filters, as in a real
deployment), with one action score per action. Each query runs ``--rounds`` times through
``ReadonlySql.run`` (the endpoint: on SQLite a query process over a copy of the caller's rows, on
PostgreSQL the reader role's views, whose rows come from a MATERIALIZED CTE), and as many times
over the baseline: plain views of the same columns filtered by the caller's id, read by the
application's own connection, with no isolation at all. Prints each query's medians (and
spread), and last ``median_overhead_ms: N``, the median over queries of endpoint minus baseline:
what isolation costs a query.

    .venv/bin/python benchmarks/sql_query.py [--database sqlite|postgresql] [--copies 1]
        [--rounds 5] [--server postgresql+psycopg://postgres@127.0.0.1:5432]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stash_pipeline.importers import read_path
from stash_pipeline.store import ActionScore, Store
from stash_pipeline.store.readonly_sql import ReadonlySql
from stash_pipeline.store.readonly_sql.views import compile_select, view_selects

from import_throughput import fresh_store, with_fresh_ids

QUERIES = {
    "count": "SELECT count(*) FROM traces",
    "ids": "SELECT id, message_count FROM traces ORDER BY id LIMIT 10",
    "messages": "SELECT avg(length(messages)) FROM traces",
    "like": "SELECT count(*) FROM traces WHERE messages LIKE '%refund%'",
    "one_trace": "SELECT id, version FROM traces WHERE id = '{trace}'",
    "one_action": "SELECT raw FROM action_scores WHERE action_id = '{action}'",
    "action_mean": "SELECT avg(raw) FROM action_scores",
    "nothing": "SELECT 1",
}
BASELINE = "bench_plain"


@contextmanager
def sqlite_store() -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as folder:
        store = Store(f"sqlite:///{folder}/stash.db")
        store.migrate()
        try:
            yield store
        finally:
            store.dispose()


def fill(store: Store, copies: int) -> dict[str, str]:
    """The traces for both accounts with an action score per action; the caller's first trace
    and action, for the queries that name one."""
    records = list(read_path(Path(ARGS.data) / "tau2-bench" / "runs", format="tau2"))
    first: dict[str, str] = {}
    for owner in ("caller", "other"):
        for copy in range(copies):
            moved = [with_fresh_ids(r, f"{owner}{copy}") for r in records]
            moved = [replace(r, trace=replace(r.trace, owner=owner)) for r in moved]
            store.import_traces(moved)
            scores = [ActionScore(a.id, r.trace.id, 1, "v1", float(i % 7))
                      for r in moved for i, a in enumerate(r.trace.actions())]
            store.save_action_scores("v1", {r.trace.id: 1 for r in moved}, scores)
            if owner == "caller" and not first:
                first = {"trace": moved[0].trace.id, "action": moved[0].trace.actions()[0].id}
    print(f"{len(records) * copies} traces per account, 2 accounts")
    return first


def baseline_runner(store: Store) -> Callable[[str], list]:
    """The query over plain views of the caller's rows, on the application's connection."""
    dialect = store.engine.dialect
    if dialect.name == "postgresql":
        with store.engine.begin() as c:
            c.execute(sa.text(f"DROP SCHEMA IF EXISTS {BASELINE} CASCADE"))
            c.execute(sa.text(f"CREATE SCHEMA {BASELINE}"))
            for name, select in view_selects(sa.literal("caller")).items():
                c.execute(sa.text(f"CREATE VIEW {BASELINE}.{name} AS "
                                  f"{compile_select(select, dialect)}"))

        def run(sql: str) -> list:
            with store.engine.connect() as c:
                raw = c.connection.driver_connection  # no parameters: % is not a placeholder
                with raw.cursor() as cursor:
                    cursor.execute(f"SET LOCAL search_path = {BASELINE}")
                    rows = cursor.execute(sql).fetchmany(1001)
                raw.rollback()
                return rows
        return run

    main = sa.MetaData()
    selects = view_selects(sa.literal("caller"), lambda t: t.to_metadata(main, schema="main"))

    def run_sqlite(sql: str) -> list:
        with store.engine.connect() as c:
            for name, select in selects.items():
                c.exec_driver_sql(f"CREATE TEMP VIEW {name} AS {compile_select(select, dialect)}")
            rows = c.exec_driver_sql(sql).fetchmany(1001)
            c.rollback()
            c.invalidate()  # its temp views go with it
            return rows
    return run_sqlite


def timed(run: Callable[[], object], rounds: int) -> list[float]:
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        seconds.append((time.perf_counter() - started) * 1000)
    return seconds


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ms ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    opener = sqlite_store() if ARGS.database == "sqlite" else fresh_store(ARGS.server)
    with opener as store:
        ids = fill(store, ARGS.copies)
        engine = ReadonlySql(store)
        problem = engine.prepare()
        assert problem is None, problem
        baseline = baseline_runner(store)
        overheads = []
        for name, template in QUERIES.items():
            sql = template.format(**ids)
            ours = timed(lambda: engine.run("caller", sql, max_rows=1000, timeout_s=60),
                         ARGS.rounds)
            plain = timed(lambda: baseline(sql), ARGS.rounds)
            overheads.append(statistics.median(ours) - statistics.median(plain))
            print(f"{name}: endpoint {spread(ours)}, plain views {spread(plain)}")
        engine.dispose()
    print(f"median_overhead_ms: {statistics.median(overheads):.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared"
                                              / "data"))
    ARGS = parser.parse_args()
    main()
