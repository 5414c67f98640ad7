"""Latency of the SQL endpoint on SQLite: a query process and a copy of the caller's rows per query.

The tau2-bench runs (../shared/data/tau2-bench/runs) are imported twice into a fresh SQLite store,
once for the caller and once for another account (so the copy filters, as in a real deployment).
Each query runs ROUNDS times through ``ReadonlySql.run``; prints the median milliseconds of each
and, last, ``median_ms: N`` over all of them. The fixed cost is the query process (``python -I -S``)
and the copy of the columns a query reads; ``messages`` is the large one.

    .venv/bin/python benchmarks/sql_query.py [--rounds 5] [--data DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stash_pipeline.importers import read_path
from stash_pipeline.store import Store
from stash_pipeline.store.readonly_sql import ReadonlySql

from import_throughput import with_fresh_ids

QUERIES = {
    "count": "SELECT count(*) FROM traces",
    "ids": "SELECT id, message_count FROM traces ORDER BY id LIMIT 10",
    "messages": "SELECT avg(length(messages)) FROM traces",
    "like": "SELECT count(*) FROM traces WHERE messages LIKE '%refund%'",
    "nothing": "SELECT 1",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    records = list(read_path(args.data / "tau2-bench" / "runs", format="tau2"))
    with tempfile.TemporaryDirectory() as folder:
        store = Store(f"sqlite:///{folder}/stash.db")
        store.migrate()
        for owner in ("caller", "other"):
            moved = [with_fresh_ids(r, owner) for r in records]
            store.import_traces([replace(r, trace=replace(r.trace, owner=owner)) for r in moved])
        engine = ReadonlySql(store)
        engine.prepare()
        print(f"{len(records)} traces per account, 2 accounts")
        medians = []
        for name, sql in QUERIES.items():
            seconds = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                engine.run("caller", sql, max_rows=1000, timeout_s=60)
                seconds.append(time.perf_counter() - started)
            medians.append(statistics.median(seconds) * 1000)
            print(f"{name}: {medians[-1]:.0f} ms")
        store.dispose()
    print(f"median_ms: {statistics.median(medians):.0f}")


if __name__ == "__main__":
    main()
