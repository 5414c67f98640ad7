"""Large imports on PostgreSQL never exhaust the server's shared lock table (issue 22): trace locks
are striped, so an import holds at most TRACE_LOCK_STRIPES of them. Before: one lock per trace,
and one import of 30,000 traces (or 2 of 4 concurrent 4,500-trace ones) failed with "out of
shared memory" on a server with the default max_locks_per_transaction (64)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from stash_pipeline.store import Store, schema
from stash_pipeline_tests.support.store_samples import (
    make_record,
    make_trace,
    own_store,
    run_together,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def pg_store(postgres_store: Store) -> Store:
    with postgres_store.transaction() as connection:
        for table in reversed(schema.metadata.sorted_tables):
            connection.execute(table.delete())
    return postgres_store


def records(prefix: str, count: int):
    return (make_record(make_trace(f"{prefix}-{i}", turns=1), f"{prefix}.jsonl:{i}")
            for i in range(count))


def lock_slots(store: Store) -> int:
    with store.reading() as connection:
        per_transaction = int(connection.execute(sa.text("SHOW max_locks_per_transaction"))
                              .scalar_one())
        connections = int(connection.execute(sa.text("SHOW max_connections")).scalar_one())
    return per_transaction * connections


def test_one_import_of_three_times_as_many_traces_as_the_lock_table_holds(pg_store: Store) -> None:
    """Three times the server's lock slots (19,200 with the defaults): one lock per trace stops
    at about twice the slots (the shared table's slack; 12,000-13,000 advisory locks on this
    server), so this fails the way 30,000 did, in two thirds of the time."""
    count = 3 * lock_slots(pg_store)
    summary = pg_store.import_traces(records("big", count))
    assert summary.traces == summary.imported == count
    assert len(pg_store.trace_ids()) == count


def test_four_concurrent_imports_of_4500_traces(pg_store: Store, postgres_url: str) -> None:
    assert 4 * 4_500 > lock_slots(pg_store) // 2
    stores = [own_store(postgres_url) for _ in range(4)]
    try:
        errors = run_together([lambda s=s, n=n: s.import_traces(records(f"c{n}", 4_500))
                               for n, s in enumerate(stores)])
    finally:
        for store in stores:
            store.dispose()
    assert errors == []
    assert len(pg_store.trace_ids()) == 4 * 4_500
