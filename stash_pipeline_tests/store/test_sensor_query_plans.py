"""Sensors that scale (issue 43), from PostgreSQL's plans: every query a sensor tick runs reads an
index, never a sequential scan of traces, models or the scoring queue, on a store large enough
(100,000 traces, 21,000 models, 60,000 queued scorings, analyzed) that the planner would scan
where no index serves. The old shared-evaluator queue query is planned too, and does scan every
trace: the check can fail."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from stash_pipeline.store import Store, schema, scoring_work
from stash_pipeline_tests.support.bulk_store_helpers import fill
from stash_pipeline_tests.support.postgres import scratch_database

pytestmark = pytest.mark.postgres

SCANNED = ("traces", "reward_models", "scoring_candidates", "scores", "scoring_marks",
           "scoring_requests", "shared_training_requests")


@pytest.fixture(scope="module")
def big_store() -> Iterator[Store]:
    with scratch_database("stash_test_plans") as url:
        store = Store(url)
        try:
            store.migrate()
            fill(store.engine, users=20_000, traces_per_user=5, pending=0.3, queued=1000,
                 asked=3000, requests=10_000)
            yield store
        finally:
            store.dispose()


def plans(store: Store, call: Callable[[], object]) -> list[str]:
    """The plan of every SELECT ``call`` sends, as PostgreSQL's EXPLAIN prints it."""
    sent: list[tuple[str, object]] = []

    def keep(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "pg_" not in statement \
                and "alembic_version" not in statement:
            sent.append((statement, parameters))

    sa.event.listen(store.engine, "before_cursor_execute", keep)
    try:
        call()
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", keep)
    assert sent, "the call sent no query"
    with store.engine.connect() as connection:
        return ["\n".join(connection.exec_driver_sql(f"EXPLAIN {statement}", parameters)
                          .scalars()) for statement, parameters in sent]


def sequential_scans(plan: str) -> list[str]:
    return [table for table in SCANNED if f"Seq Scan on {table} " in plan + " "]


HOT = {
    "personal scoring page": lambda s: s.scoring_work(personal=True, limit=512),
    "release scoring page": lambda s: s.scoring_work(personal=False, evaluator="r1", limit=512),
    "models of a page": lambda s: s.scoring_models([f"m{i}" for i in range(1, 60)]),
    "queued models": lambda s: s.queued_models(None, 200),
    "queued models past a cursor": lambda s: s.queued_models(
        (schema.utcnow() - timedelta(seconds=500), "q1"), 200),
    "score again": lambda s: s.score_again_requested(None, 200),
    "score again past a cursor": lambda s: s.score_again_requested(
        (schema.utcnow() - timedelta(seconds=500), "m1"), 200),
    "partitions to retire": lambda s: _retiring_undone(s),
    "scoring requests": lambda s: s.scoring_requests(None, limit=200),
    "scoring requests past a cursor": lambda s: s.scoring_requests(
        (schema.utcnow() - timedelta(seconds=500), "0"), limit=200),
    "scoring requests past a cursor from before 0012": lambda s: s.scoring_requests(
        after=5000, limit=200),
    "shared training requests": lambda s: s.shared_training_requests(after=5000, limit=200),
}


class _Undo(Exception):
    pass


def _retiring_undone(store: Store) -> None:
    """The retirement sensor's page of models, its stamps rolled back (the store stays as
    filled for the other queries)."""
    try:
        with store.retiring_partitions(schema.utcnow() - timedelta(days=7), 200) as models:
            assert models
            raise _Undo
    except _Undo:
        pass


@pytest.mark.parametrize("query", sorted(HOT))
def test_a_sensor_query_reads_an_index(big_store: Store, query: str) -> None:
    for plan in plans(big_store, lambda: HOT[query](big_store)):
        assert not sequential_scans(plan), plan
        assert "Index" in plan, plan


def test_an_import_finds_its_owners_kept_current_models_through_an_index(
        big_store: Store) -> None:
    def kept() -> None:
        with big_store.reading() as connection:
            scoring_work.kept_current_ids(connection, ["u1", "u2"], per_owner=3)

    for plan in plans(big_store, kept):
        assert not sequential_scans(plan), plan


def test_the_old_queue_query_scans_every_trace(big_store: Store) -> None:
    """What the shared sensor ran before the queue: the check above would catch it."""
    [plan] = plans(big_store, lambda: big_store.traces_pending_scoring("r1", limit=512))
    assert "traces" in sequential_scans(plan), plan
