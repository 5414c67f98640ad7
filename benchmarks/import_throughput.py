"""Import throughput of Store.import_traces against a naive one-row-at-a-time insert.

All tau2-bench runs (../shared/data/tau2-bench/runs) are parsed once by the project's importer, then
imported ROUNDS times under fresh trace ids into a fresh PostgreSQL database (dropped afterwards),
alternating the bulk import and the naive baseline (same schema, same rows, one INSERT a row, one
transaction a round). Prints medians over rounds; the last line is ``ratio: N`` (traces/s of the
store over the baseline).

    .venv/bin/python benchmarks/import_throughput.py [--rounds 10] [--server URL]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import fields, replace
from pathlib import Path

import sqlalchemy as sa

from stash_pipeline.core.feedback import Feedback, feedback_trace_ids
from stash_pipeline.core.records import ImportedTrace
from stash_pipeline.importers import read_path
from stash_pipeline.store import Store, schema
from stash_pipeline.store.accounts import ensure_accounts
from stash_pipeline.store.feedback import TABLES
from stash_pipeline.store.imports import action_row, trace_row

RUNS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tau2-bench" / "runs"


def with_fresh_ids(record: ImportedTrace, tag: str) -> ImportedTrace:
    """The same record under a new trace id; feedback follows its trace and actions."""
    old = record.trace.id
    new = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}/{old}"))

    def moved(item: Feedback) -> Feedback:
        changes = {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tag}/{item.id}"))}
        for f in fields(item):
            value = getattr(item, f.name)
            if f.name.endswith("trace_id") and value == old:
                changes[f.name] = new
            elif f.name.endswith("action_id") and value and value.startswith(old + "/"):
                changes[f.name] = new + value[len(old):]
        return replace(item, **changes)

    assert all(t == old for item in record.feedback for t in feedback_trace_ids(item))
    return replace(record, trace=replace(record.trace, id=new),
                   feedback=tuple(moved(item) for item in record.feedback))


def naive_import(store: Store, records: list[ImportedTrace]) -> None:
    """The baseline: per record, look it up, then one INSERT for every row."""
    t = schema.traces
    with store.transaction() as connection:
        for record in records:
            trace = record.trace
            ensure_accounts(connection, [trace.owner])
            connection.execute(sa.select(t.c.id).where(t.c.id == trace.id)).first()
            actions = trace.actions()
            connection.execute(t.insert(), trace_row(trace, actions, version=1,
                                                      contribute=trace.contribute))
            for action in actions:
                connection.execute(schema.actions.insert(), action_row(trace, action))
            for item in record.feedback:
                connection.execute(TABLES[type(item)].insert(), vars(item))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432")
    args = parser.parse_args()

    records = list(read_path(RUNS, format="tau2"))
    actions = sum(len(r.trace.actions()) for r in records)
    print(f"records: {len(records)} traces, {actions} actions from {RUNS}")

    admin = sa.create_engine(f"{args.server}/postgres", isolation_level="AUTOCOMMIT")
    name = f"stash_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    store = Store(f"{args.server}/{name}")
    try:
        store.migrate()
        bulk, naive = [], []
        for round_index in range(args.rounds):
            # Fresh ids are made outside the timed region: they are the benchmark's, not the store's.
            batch = [with_fresh_ids(r, f"bulk{round_index}") for r in records]
            start = time.perf_counter()
            summary = store.import_traces(batch)
            bulk.append(time.perf_counter() - start)
            assert summary.imported == len(records) and summary.actions == actions

            batch = [with_fresh_ids(r, f"naive{round_index}") for r in records]
            start = time.perf_counter()
            naive_import(store, batch)
            naive.append(time.perf_counter() - start)
            print(f"round {round_index}: bulk {bulk[-1]:.3f} s, naive {naive[-1]:.3f} s")
        assert len(store.trace_ids()) == 2 * args.rounds * len(records)
    finally:
        store.dispose()
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    bulk_s, naive_s = statistics.median(bulk), statistics.median(naive)
    print(f"store_traces_per_s: {len(records) / bulk_s:.0f}")
    print(f"store_actions_per_s: {actions / bulk_s:.0f}")
    print(f"naive_traces_per_s: {len(records) / naive_s:.0f}")
    print(f"naive_actions_per_s: {actions / naive_s:.0f}")
    print(f"ratio: {naive_s / bulk_s:.2f}")


if __name__ == "__main__":
    main()
