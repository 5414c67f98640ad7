"""A release's queueing at scale, with imports beside it: the store (PostgreSQL) holds
``--traces`` traces (default 1,000,000, stash_pipeline_tests/support/bulk_store_helpers.py) that
the release before has scored; a new release is saved through ``Store.save_release`` (its row,
then every trace queued for it a batch a transaction, store.scoring_work.settle_release_queue)
while another thread imports one small trace after another, as an API would.

Prints the release's total time, its batches and the longest one (each holds the queue's lock for
at most its own duration), and the imports made meanwhile with their median and longest time
(an import's wait for the lock is within it); last ``longest_import_s: X``. The store is built
once into stash_bench_release_store (``--reuse`` keeps it and uses it when its size matches;
each measurement runs on a copy of it).

    .venv/bin/python benchmarks/release_queueing.py [--traces 1000000] [--batch 2000] [--reuse] \\
        [--server postgresql+psycopg://postgres@127.0.0.1:5432]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the store suite's bulk fill and sample traces
from stash_pipeline.store import Release, Store, scoring_work  # noqa: E402
from stash_pipeline_tests.support.bulk_store_helpers import fill  # noqa: E402
from stash_pipeline_tests.support.store_samples import make_record, make_trace  # noqa: E402

BUILT_DB = "stash_bench_release_store"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--batch", type=int, default=scoring_work.RELEASE_QUEUE_BATCH,
                        help="traces a batch (store.scoring_work.RELEASE_QUEUE_BATCH)")
    parser.add_argument("--server", default=os.environ.get(
        "STASH_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432"))
    args = parser.parse_args()
    scoring_work.RELEASE_QUEUE_BATCH = args.batch
    admin = sa.create_engine(f"{args.server}/postgres", isolation_level="AUTOCOMMIT")
    shape = f"traces={args.traces}"
    if not (args.reuse and built_shape(admin, BUILT_DB) == shape):
        build(admin, args.server, args.traces, shape)
    copy = f"{BUILT_DB}_{uuid.uuid4().hex[:8]}"
    execute(admin, f'CREATE DATABASE "{copy}" TEMPLATE "{BUILT_DB}" STRATEGY FILE_COPY')
    try:
        return measure(Store(f"{args.server}/{copy}"))
    finally:
        execute(admin, f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')
        if not args.reuse:
            execute(admin, f'DROP DATABASE IF EXISTS "{BUILT_DB}" WITH (FORCE)')


def execute(admin: sa.Engine, statement: str) -> None:
    with admin.connect() as connection:
        connection.execute(sa.text(statement))


def built_shape(admin: sa.Engine, name: str) -> str | None:
    with admin.connect() as connection:
        return connection.scalar(sa.text(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = :n"),
            {"n": name})


def build(admin: sa.Engine, server: str, traces: int, shape: str) -> None:
    started = time.perf_counter()
    execute(admin, f'DROP DATABASE IF EXISTS "{BUILT_DB}" WITH (FORCE)')
    execute(admin, f'CREATE DATABASE "{BUILT_DB}"')
    store = Store(f"{server}/{BUILT_DB}")
    try:
        store.migrate()
        fill(store.engine, users=max(1, traces // 10), traces_per_user=10, pending=0.0)
    finally:
        store.dispose()
    execute(admin, f"COMMENT ON DATABASE \"{BUILT_DB}\" IS '{shape}'")
    print(f"built {traces} traces in {time.perf_counter() - started:.0f} s", flush=True)


def measure(store: Store) -> int:
    batches: list[float] = []
    transaction = store.transaction
    releaser = threading.current_thread()

    def timed_transaction():  # each of the release's transactions, lock wait and commit included
        if threading.current_thread() is not releaser:
            return transaction()

        class Timed:
            def __enter__(self):
                self.started = time.perf_counter()
                self.inner = transaction()
                return self.inner.__enter__()

            def __exit__(self, *exc):
                result = self.inner.__exit__(*exc)
                batches.append(time.perf_counter() - self.started)
                return result
        return Timed()

    imports: list[float] = []
    releasing = threading.Event()

    def import_beside() -> None:
        n = 0
        while releasing.is_set():
            n += 1
            started = time.perf_counter()
            store.import_traces([make_record(make_trace(f"bench-{n}", owner="bench"))])
            imports.append(time.perf_counter() - started)
            time.sleep(0.05)

    store.transaction = timed_transaction
    releasing.set()
    importer = threading.Thread(target=import_beside)
    importer.start()
    started = time.perf_counter()
    try:
        store.save_release(Release("r2", "file:///r2.tar.gz", {}, {}))
    finally:
        total = time.perf_counter() - started
        releasing.clear()
        importer.join()
        store.transaction = transaction
    queued = store.engine.connect().execute(sa.text(
        "SELECT count(*) FROM scoring_candidates WHERE evaluator = 'r2'")).scalar_one()
    print(f"release saved and {queued} traces queued in {total:.1f} s, "
          f"{len(batches)} transactions of {scoring_work.RELEASE_QUEUE_BATCH} traces; "
          f"longest {max(batches):.3f} s, median {statistics.median(batches):.3f} s")
    print(f"{len(imports)} imports meanwhile: median {statistics.median(imports):.3f} s, "
          f"longest {max(imports):.3f} s")
    print(f"longest_import_s: {max(imports):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
