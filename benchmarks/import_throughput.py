"""Import throughput of Store.import_traces against a naive one-row-at-a-time insert.

All tau2-bench runs (../shared/data/tau2-bench/runs) are parsed once by the project's importer, then
imported ROUNDS times under fresh trace ids into a fresh PostgreSQL database (dropped afterwards),
alternating the bulk import and the naive baseline (same schema, same rows, one INSERT a row, one
transaction a round). Prints medians over rounds; the last line is ``ratio: N`` (traces/s of the
store over the baseline).

With ``--preference``, the hh-rlhf preference data set (../shared/data/hh-rlhf, gzip JSONL) end to
end as ``stash-pipeline import --skip-invalid`` runs it: read, converted (two traces and a
comparison a record) and stored, ROUNDS times under a fresh owner (so fresh ids), then once more
as a reimport (a no-op). The last line is ``preference_records_per_s: N`` (source records a second,
median over rounds).

    .venv/bin/python benchmarks/import_throughput.py [--rounds 10] [--server URL] [--preference]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RUNS = DATA / "tau2-bench" / "runs"
HH_RLHF = DATA / "hh-rlhf" / "harmless-base-dev.jsonl.gz"


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


@contextmanager
def fresh_store(server: str) -> Iterator[Store]:
    """A migrated store on a new PostgreSQL database, dropped afterwards."""
    admin = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    name = f"stash_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    store = Store(f"{server}/{name}")
    try:
        store.migrate()
        yield store
    finally:
        store.dispose()
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


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


def preference_rounds(store: Store, path: Path, rounds: int) -> None:
    """Read-convert-store of a preference file per round, as the CLI's import does it."""
    seconds, source_records = [], 0
    for round_index in range(rounds):
        skipped: list = []
        start = time.perf_counter()
        summary = store.import_traces(read_path(path, owner=f"bench{round_index}",
                                                skip_invalid=True, on_skipped=skipped.append))
        seconds.append(time.perf_counter() - start)
        source_records = summary.comparisons + len(skipped)
        assert summary.imported == 2 * summary.comparisons
        print(f"round {round_index}: {seconds[-1]:.3f} s, {summary.comparisons} comparisons, "
              f"{len(skipped)} skipped")
    start = time.perf_counter()
    again = store.import_traces(read_path(path, owner=f"bench{rounds - 1}", skip_invalid=True))
    reimport = time.perf_counter() - start
    assert again.imported == again.updated == 0 and again.unchanged == again.traces
    median = statistics.median(seconds)
    print(f"records: {source_records} preference records from {path}")
    print(f"preference_pairs_per_s: {summary.comparisons / median:.0f}")
    print(f"reimport_records_per_s: {source_records / reimport:.0f}")
    print(f"preference_records_per_s: {source_records / median:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432")
    parser.add_argument("--preference", nargs="?", const=HH_RLHF, type=Path, metavar="FILE",
                        help=f"time a preference data set instead (default {HH_RLHF.name})")
    args = parser.parse_args()
    if args.preference:
        with fresh_store(args.server) as store:
            preference_rounds(store, args.preference, args.rounds)
        return

    records = list(read_path(RUNS, format="tau2"))
    actions = sum(len(r.trace.actions()) for r in records)
    print(f"records: {len(records)} traces, {actions} actions from {RUNS}")

    with fresh_store(args.server) as store:
        bulk, naive = [], []
        for round_index in range(args.rounds):
            # Fresh ids are made outside the timed region: they are the benchmark's, not the
            # store's.
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

    bulk_s, naive_s = statistics.median(bulk), statistics.median(naive)
    print(f"store_traces_per_s: {len(records) / bulk_s:.0f}")
    print(f"store_actions_per_s: {actions / bulk_s:.0f}")
    print(f"naive_traces_per_s: {len(records) / naive_s:.0f}")
    print(f"naive_actions_per_s: {actions / naive_s:.0f}")
    print(f"ratio: {naive_s / bulk_s:.2f}")


if __name__ == "__main__":
    main()
